"""Metrics sinks for the training runner: console progress, metrics.jsonl, TensorBoard, W&B.

Only the main rank builds real sinks; every other rank gets a null object from the same
factory, so the runner calls ``tel.log(record)`` unconditionally and never branches on rank::

    with Telemetry.create(run_dir, to_dict(cfg), total_iterations=N, enabled=ctx.is_main) as tel:
        for it in range(start, N):
            ...
            tel.log({"iteration": it + 1, "env_steps": steps, ...})
        tel.summary({})

Record conventions (the ``metrics.jsonl`` keys are a public interface):

- ``iteration`` counts *completed* iterations: the first record of a fresh run has
  ``iteration == 1`` and the last ``iteration == total_iterations``. ``start_iteration`` is the
  number already completed before this session (a resumed checkpoint's iteration).
- ``env_steps`` (global, all ranks) is the x-axis of TensorBoard and W&B.
- Values may be Python numbers, numpy scalars or torch tensors (converted on the way out);
  ``None`` and non-finite floats become JSON ``null``, so every line is strict JSON.

The run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one JSON
object per iteration, appended across resumes; see :func:`read_metrics`), ``checkpoints/`` and
the TensorBoard event files.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from distrl.install import pip_install
from distrl.safe_files import safe_open

__all__ = ["Telemetry", "read_metrics", "to_jsonable"]

log = logging.getLogger("distrl")
"""What a run says (messages, plain progress lines, the summary) goes through the ``distrl``
logger at INFO: ``logging.getLogger("distrl").setLevel(logging.WARNING)`` silences it, a
handler of your own on it routes it (distrl then adds none of its own)."""


class ConsoleHandler(logging.Handler):
    """distrl's default handler: each record on the run's rich console (the one its progress
    bar draws on, so a line never tears the bar), verbatim: no markup, paths never wrapped."""

    def __init__(self) -> None:
        super().__init__()
        self.console: Console | None = None  # the active run's; a plain one otherwise

    def emit(self, record: logging.LogRecord) -> None:
        console = self.console if self.console is not None else Console()
        text: Any = record.msg if not isinstance(record.msg, str) else record.getMessage()
        style = getattr(record, "style", None)
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


_HANDLER = ConsoleHandler()


def _use_console(console: Console | None) -> None:
    """Send the ``distrl`` logger's records to ``console`` (None: back to a plain one); adds
    distrl's handler only when nobody configured the logger (no handler, level unset)."""
    if not log.handlers:
        log.addHandler(_HANDLER)
        log.propagate = False
        if log.level == logging.NOTSET:
            log.setLevel(logging.INFO)
    _HANDLER.console = console


METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"

WANDB_MISSING = (
    "--wandb True needs the Weights & Biases client, which is not installed. "
    f"Install it with `{pip_install('wandb')}` (or `pip install wandb`), or drop --wandb True."
)


# --------------------------------------------------------------------------------------------
# value conversion
# --------------------------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """Plain-Python, strict-JSON version of ``value``.

    Tensors and numpy values go through ``.tolist()`` (a 0-d one becomes a scalar); non-finite
    floats become ``None``; tuples become lists; mappings keep their keys as strings; anything
    else unknown becomes ``str(value)``.
    """
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if isinstance(value, str):  # subclasses (StrEnum, numpy.str_)
        return str(value)
    if isinstance(value, int):  # subclasses (IntEnum); bool is handled above
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    tolist = getattr(value, "tolist", None)  # torch.Tensor, numpy.ndarray, numpy scalars
    if callable(tolist):
        if hasattr(value, "detach"):  # torch: leave the autograd graph before copying to host
            value = value.detach()
        return to_jsonable(tolist())
    return str(value)


def _plain_config(value: Any) -> Any:
    """Config dict -> something ``yaml.safe_dump`` accepts (tuples as lists, paths as str)."""
    if isinstance(value, Mapping):
        return {str(k): _plain_config(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_config(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return to_jsonable(value)


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    return str(timedelta(seconds=max(0, round(seconds))))


def _fmt_int(value: Any) -> str:
    return "n/a" if value is None else f"{round(value):,}"


def _fmt_return(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1f}"


TAIL_BYTES = 1 << 16
"""How much of an existing metrics.jsonl is read for its newest record (records are ~2 KB)."""


def _last_iteration(tail: bytes, whole: bool) -> int | None:
    """The iteration of the newest whole record in the last bytes of a metrics.jsonl (``whole``:
    they are the whole file); a half-written last line, or a first line the window cut, does
    not count."""
    lines = tail.split(b"\n")[:-1]  # the last is empty, or a line not finished
    if not whole:
        lines = lines[1:]
    for raw in reversed(lines):
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("iteration"), int):
            return int(rec["iteration"])
    return None


def read_metrics(path: Path | str, *, dedupe: bool = True) -> list[dict]:
    """Records of a ``metrics.jsonl`` file (or of the run directory holding one), in order.

    Lines that do not parse are skipped (bytes that are not UTF-8 included): a crash can leave
    the last line half-written. With
    ``dedupe`` (default) the history is made consistent across resumes: a resumed run restarts
    from its checkpoint and logs those iterations again, so when ``iteration`` goes back to
    ``k`` the earlier records with ``iteration >= k`` (the lost work after the checkpoint) are
    dropped and the later ones kept.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    records: list[dict] = []
    with path.open("rb") as f:
        for raw in f:
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                continue
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict):
                continue
            if dedupe and records and isinstance(rec.get("iteration"), int):
                it = rec["iteration"]
                last = records[-1].get("iteration")
                if isinstance(last, int) and it <= last:
                    records = [
                        r
                        for r in records
                        if not (isinstance(r.get("iteration"), int) and r["iteration"] >= it)
                    ]
            records.append(rec)
    return records


# --------------------------------------------------------------------------------------------
# sinks
# --------------------------------------------------------------------------------------------


class Telemetry:
    """Every metrics sink of one run behind one object; build it with :meth:`create`.

    The base class is the null object used on non-main ranks (and with ``enabled=False``):
    every method is a cheap no-op and nothing touches the filesystem.
    """

    enabled: bool = False
    run_dir: Path | None = None
    start_iteration: int = 0
    """Iterations already completed when this run started (a resume); the bar starts there."""
    last_iteration: int | None = None
    """The iteration of the newest whole record in ``metrics.jsonl`` (read from the file's
    tail when it is opened, so a process that takes over writing knows what its predecessor
    logged); None: none yet."""

    @classmethod
    def create(
        cls,
        run_dir: Path | str | None,
        cfg_dict: Mapping[str, Any],
        *,
        total_iterations: int,
        start_iteration: int = 0,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str | None = None,
        wandb_entity: str | None = None,
        progress: bool = True,
        enabled: bool = True,
        console: Console | None = None,
    ) -> Telemetry:
        """Open the sinks of a run (main rank) or return the null object (``enabled=False``).

        Args:
            run_dir: output directory; created with ``checkpoints/`` inside. Required when
                enabled.
            cfg_dict: resolved config (``config.to_dict(cfg)``), written to ``config.yaml``.
            total_iterations: the iteration count at which training ends (progress bar length).
            start_iteration: iterations already completed (resume); the bar starts there.
            tensorboard: write TensorBoard events into ``run_dir``.
            wandb: also log to Weights & Biases; raises ``ImportError`` when not installed.
            wandb_project, wandb_entity: where W&B logs (None: $WANDB_PROJECT or 'distrl';
                $WANDB_ENTITY or the account's default).
            progress: live progress bar on a terminal, a plain summary line every ~5% of the
                run otherwise; ``False`` disables both.
            enabled: ``False`` on non-main ranks.
            console: rich console to print on (default: a new one on stdout).
        """
        if not enabled:
            return cls()
        if run_dir is None:
            raise ValueError("Telemetry.create(enabled=True) needs a run_dir")
        return _ActiveTelemetry(
            Path(run_dir),
            cfg_dict,
            total_iterations=total_iterations,
            start_iteration=start_iteration,
            tensorboard=tensorboard,
            wandb=wandb,
            wandb_where=(wandb_project, wandb_entity),
            progress=progress,
            console=console,
        )

    def log(self, record: Mapping[str, Any]) -> None:
        """Write one iteration's record to every sink and update the progress display."""

    def message(self, text: str, *, style: str | None = None) -> None:
        """Print a line through the progress console (it does not tear the live bar)."""

    def summary(self, final: Mapping[str, Any] | None = None) -> None:
        """Stop the live display and print a table of the run's final numbers."""

    def close(self) -> None:
        """Flush and close every sink; safe to call more than once."""

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _ActiveTelemetry(Telemetry):
    """The main rank's sinks."""

    enabled = True
    run_dir: Path  # always set here (the null object has none)

    def __init__(
        self,
        run_dir: Path,
        cfg_dict: Mapping[str, Any],
        *,
        total_iterations: int,
        start_iteration: int,
        tensorboard: bool,
        wandb: bool,
        wandb_where: tuple[str | None, str | None],
        progress: bool,
        console: Console | None,
    ) -> None:
        # Import optional sinks before creating anything, so a missing package leaves no
        # half-made run directory behind.
        wandb_mod: ModuleType | None = None
        if wandb:
            try:
                import wandb as _wandb
            except ImportError as e:
                raise ImportError(WANDB_MISSING) from e
            wandb_mod = _wandb

        self.run_dir = run_dir
        self.total_iterations = int(total_iterations)
        # the ranks the run started with (an elastic run's summary says how many were left)
        self._world = int(cfg_dict.get("nproc", 1) or 1) * int(cfg_dict.get("nnodes", 1) or 1)
        self.start_iteration = int(start_iteration)
        self.console = console if console is not None else Console()
        _use_console(self.console)
        self._closed = False
        self._t0 = time.perf_counter()
        self._last: dict[str, Any] = {}
        self._sps_sum = 0.0
        self._sps_n = 0
        self._last_return: Any = None  # last non-None return (many iterations finish none)
        self._metrics: IO[str] | None = None
        self._writer: Any = None
        self._wandb_run: Any = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None

        try:
            (run_dir / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
            self._write_config(cfg_dict)
            self._metrics = self._open_metrics()
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                # SummaryWriter flushes on its own every flush_secs; log() never flushes it.
                # A roomy queue keeps add_scalar from blocking on the writer thread (the
                # default of 10 events is less than one record).
                self._writer = SummaryWriter(log_dir=str(run_dir), flush_secs=30, max_queue=1000)
            if wandb_mod is not None:
                self._wandb_run = wandb_mod.init(
                    project=wandb_where[0] or os.environ.get("WANDB_PROJECT", "distrl"),
                    entity=wandb_where[1] or os.environ.get("WANDB_ENTITY"),
                    name=run_dir.name,
                    dir=str(run_dir),
                    config=_plain_config(cfg_dict),
                )
        except BaseException:
            self.close()
            raise

        # Live bar only on a real terminal; pipes and CI get plain lines (no control codes).
        self._show = progress
        self._live = progress and self.console.is_terminal
        total = max(1, self.total_iterations)
        self._every = max(1, total // 20)
        if self._live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps {task.fields[steps]}"),
                TextColumn("sps {task.fields[sps]}"),
                TextColumn("return {task.fields[ret]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task(
                escape(str(cfg_dict.get("task", "train"))),
                total=total,
                completed=min(self.start_iteration, total),
                steps="n/a",
                sps="n/a",
                ret="n/a",
            )
            self._progress.start()

    # -- setup ------------------------------------------------------------------------------

    def _write_config(self, cfg_dict: Mapping[str, Any]) -> None:
        path = self.run_dir / CONFIG_FILE
        # A name of this writer's own (pid and random digits): two writers never share one
        tmp = path.with_name(f".tmp-{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            tmp.write_text(
                yaml.safe_dump(_plain_config(cfg_dict), sort_keys=False, default_flow_style=False),
                encoding="utf-8",
            )
            os.replace(tmp, path)  # atomic: a reader never sees half a config
        finally:
            tmp.unlink(missing_ok=True)

    def _open_metrics(self) -> IO[str]:
        path = self.run_dir / METRICS_FILE
        # Line-buffered append: every record reaches the OS as soon as it is written, so a
        # crash loses nothing already logged, and a resumed run continues the same file. Opened
        # first, never through a symbolic link (safe_files): a link's target is neither read
        # nor appended to.
        f = safe_open(path, "a", encoding="utf-8", buffering=1)
        try:
            # A crash mid-write can leave a partial last line; start ours on a fresh line so
            # the damage stays confined to that one (skipped by read_metrics).
            size = os.fstat(f.fileno()).st_size
            if size > 0:
                with path.open("rb") as tail:
                    tail.seek(-min(size, TAIL_BYTES), os.SEEK_END)
                    data = tail.read()
                self.last_iteration = _last_iteration(data, whole=size <= TAIL_BYTES)
                if not data.endswith(b"\n"):
                    f.write("\n")
        except BaseException:
            f.close()
            raise
        return f

    # -- per iteration ----------------------------------------------------------------------

    def log(self, record: Mapping[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("Telemetry.log() after close()")
        rec = {str(k): to_jsonable(v) for k, v in record.items()}
        assert self._metrics is not None
        self._metrics.write(json.dumps(rec, allow_nan=False) + "\n")
        self._last = rec
        if isinstance(rec.get("iteration"), int):
            self.last_iteration = rec["iteration"]

        step = rec.get("env_steps")
        if not isinstance(step, int):
            step = rec.get("iteration") if isinstance(rec.get("iteration"), int) else None
        if self._writer is not None or self._wandb_run is not None:
            scalars = {
                k: v
                for k, v in rec.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            if self._writer is not None:
                for k, v in scalars.items():
                    self._writer.add_scalar(k, v, global_step=step)
                if isinstance(rec.get("eval/video"), str):  # --eval.video-interval's mp4
                    self._video_to_tensorboard(rec["eval/video"], step)
            if self._wandb_run is not None:
                self._wandb_run.log(scalars, step=step)
                video = rec.get("eval/video")  # --eval.video-interval: the mp4 itself
                if isinstance(video, str):
                    import wandb

                    self._wandb_run.log({"eval/video": wandb.Video(video, format="mp4")}, step=step)

        if rec.get("episode_return_mean") is not None:
            self._last_return = rec["episode_return_mean"]
        sps = rec.get("perf/sps")
        if isinstance(sps, int | float):
            self._sps_sum += sps
            self._sps_n += 1
        if self._show:
            self._update_progress(rec)

    def _video_to_tensorboard(self, path: str, step: int | None) -> None:
        """The filmed episode as an animated image under ``eval/video`` (TensorBoard's Images
        tab): a small GIF of the mp4 (``render.gif_preview``), as ``add_video`` writes it but
        without moviepy. A preview that fails is said and skipped; the mp4 stays."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from distrl.render import gif_preview

        try:
            gif, height, width = gif_preview(path)
        except Exception as e:  # never worth the run
            self.message(f"video: {path} not shown in TensorBoard ({type(e).__name__}: {e})")
            return
        image = Summary.Image(
            height=height, width=width, colorspace=3, encoded_image_string=gif
        )  # fmt: skip
        summary = Summary(value=[Summary.Value(tag="eval/video", image=image)])
        # the file writer SummaryWriter's own add_* methods write through
        self._writer._get_file_writer().add_summary(summary, step)

    def _update_progress(self, rec: Mapping[str, Any]) -> None:
        it = rec.get("iteration")
        if self._progress is not None and self._task is not None:
            fields: dict[str, Any] = {
                "steps": _fmt_int(rec.get("env_steps")),
                "sps": _fmt_int(rec.get("perf/sps")),
                "ret": _fmt_return(self._last_return),
            }
            if isinstance(it, int):
                fields["completed"] = it
            self._progress.update(self._task, **fields)
            return
        if not isinstance(it, int):
            return
        if not (
            it % self._every == 0 or it >= self.total_iterations or it == self.start_iteration + 1
        ):
            return
        log.info(self._plain_line(rec))

    def _plain_line(self, rec: Mapping[str, Any]) -> str:
        it = rec.get("iteration", 0)
        done = it - self.start_iteration
        elapsed = time.perf_counter() - self._t0
        eta = elapsed / done * (self.total_iterations - it) if done > 0 else None
        return (
            f"it {it}/{self.total_iterations}"
            f" | steps {_fmt_int(rec.get('env_steps'))}"
            f" | sps {_fmt_int(rec.get('perf/sps'))}"
            f" | return {_fmt_return(self._last_return)}"
            f" | eta {_fmt_duration(eta)}"
        )

    # -- console ----------------------------------------------------------------------------

    def message(self, text: str, *, style: str | None = None) -> None:
        # through the logger (ConsoleHandler: verbatim, never wrapped, on the bar's console)
        log.info(text, extra={"style": style})

    def summary(self, final: Mapping[str, Any] | None = None) -> None:
        self._stop_progress()
        rec = dict(self._last)
        if final:
            rec.update({str(k): to_jsonable(v) for k, v in final.items()})
        if "perf/sps_mean" in rec:
            sps = rec["perf/sps_mean"]
        else:
            sps = self._sps_sum / self._sps_n if self._sps_n else rec.get("perf/sps")
        wall = rec.get("wall_time")
        if not isinstance(wall, int | float):
            wall = time.perf_counter() - self._t0

        table = Table(title="distrl run summary", show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column(justify="right")
        it = rec.get("iteration")
        table.add_row("iteration", f"{'n/a' if it is None else it}/{self.total_iterations}")
        table.add_row("env steps", _fmt_int(rec.get("env_steps")))
        table.add_row("wall time", _fmt_duration(wall))
        table.add_row("mean SPS", _fmt_int(sps))
        ret = rec.get("episode_return_mean")
        ret = self._last_return if ret is None else ret
        table.add_row("final return", "n/a: no episode ended" if ret is None else _fmt_return(ret))
        members, started = rec.get("dist/members"), self._world
        if isinstance(members, int) and members < started:  # elastic: ranks lost on the way
            table.add_row("ranks", f"{members} of {started} at the end (lost ranks not replaced)")
        if rec.get("stopped"):
            table.add_row("stopped", str(rec["stopped"]))
        table.add_row("run dir", str(self.run_dir))
        log.info(table)

    # -- shutdown ---------------------------------------------------------------------------

    def _stop_progress(self) -> None:
        self._show = False
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Each sink closes even when another fails; the first error is re-raised at the end.
        errors: list[BaseException] = []
        if _HANDLER.console is self.console:
            _HANDLER.console = None
        for fn in (self._stop_progress, self._close_metrics, self._close_writer, self._close_wandb):
            try:
                fn()
            except Exception as e:  # re-raised below
                errors.append(e)
        if errors:
            raise errors[0]

    def _close_metrics(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()  # flushes pending events
            self._writer = None

    def _close_wandb(self) -> None:
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None
