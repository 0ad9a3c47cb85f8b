"""distrl as a package, as a user installs it: an sdist made from the checkout's tracked files, a
wheel built from that sdist (so the sdist is proven to hold what the wheel needs), and the wheel
installed into a fresh venv that then runs ``distrl --version`` and a 3-iteration ``distrl train
cartpole`` from a temporary directory with PYTHONPATH cleared: the code that runs is the wheel's,
not the checkout's.

Everything here works offline with what the test's own interpreter has: the sdist comes from
setuptools' PEP 517 hook (``python -m build`` is not a dependency), the wheel from ``pip wheel
--no-build-isolation --no-index``. The fresh venv must not download torch (GBs of CUDA on PyPI's
Linux build) and cannot inherit it with ``--system-site-packages`` (the base Python has no torch),
so it gets a ``.pth`` file naming this interpreter's site-packages: torch, gymnasium and the other
dependencies resolve from there, after the venv's own site-packages. A plain path line in a
``.pth`` file adds that directory without processing the ``.pth`` files inside it, so the
checkout's editable install (an ``__editable__`` finder there) stays out of the fresh venv; the
test asserts ``distrl.__file__`` is inside it. pip runs from that path too (the venv is made
``--without-pip``; ensurepip's bundled setuptools would be older than the build needs), and
installs into the venv whose Python runs it.

And one install recipe everywhere: the error hints, `distrl list`, the README and
docs/troubleshooting.md all give ``distrl.install``'s command (distrl is not on PyPI).
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import distrl
from distrl.install import TORCH_CPU_INDEX, pip_install

ROOT = Path(__file__).resolve().parents[1]


def _git_files(*paths: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", *paths], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.split("\0") if p]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stderr}"
    return r


def test_one_install_recipe_everywhere():
    """README and troubleshooting give the recipe, name every extra pyproject has and the CPU
    index of torch; no message or page gives another way to install distrl (``pip install
    'distrl[x]'`` would look on PyPI, where distrl is not; ``-e`` without the pins)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    trouble = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    assert pip_install("dev,mujoco,video,export") in readme
    assert pip_install("<extra>") in trouble and pip_install("mujoco") in trouble
    for page in (readme, trouble):
        assert TORCH_CPU_INDEX in page and "not on PyPI" in page
        assert all(f"`{extra}`" in page for extra in extras), sorted(extras)

    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "src").rglob("*.py")]
    for path in pages:
        if path.name in ("journal.md", "install.py"):  # the journal is history
            continue
        text = path.read_text(encoding="utf-8")
        other = re.findall(r"pip install (?:'|\")?distrl\[|pip install -e", text)
        assert not other, f"{path.relative_to(ROOT)}: {other}; use {pip_install('<extra>')}"


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel built from the sdist), made from a copy of the checkout's tracked files:
    what a fresh clone has, and no build files left in the checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout: the sdist is made from the tracked files")
    tree, out = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("dist")
    for rel in _git_files():
        if (ROOT / rel).is_file():  # a tracked file deleted in the working tree is left out
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, tree / rel)
    hook = f"import setuptools.build_meta as b; print(b.build_sdist({str(out)!r}))"
    name = _run([sys.executable, "-c", hook], cwd=tree).stdout.strip().splitlines()[-1]
    sdist = out / name
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    _run([*pip_wheel, "--no-index", "-q", "-w", str(out), str(sdist)], cwd=out)
    (wheel,) = out.glob("distrl-*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_sdist_and_wheel_hold_every_shipped_file(archives):
    """Every tracked file under src/distrl (the .py modules and the data read at run time: the
    suites' init_states JSON, py.typed) is in the sdist and in the wheel built from it; the
    wheel holds nothing else but its metadata, and the sdist also carries constraints.txt (the
    install recipe's pins) and the license."""
    sdist, wheel = archives
    shipped = [p for p in _git_files("src/distrl") if (ROOT / p).is_file()]
    data = [p for p in shipped if not p.endswith(".py")]
    assert "src/distrl/py.typed" in data and any("init_states" in p for p in data)

    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = sorted(set(shipped) - in_sdist)
    assert not missing, f"sdist lacks {missing}"
    assert {"constraints.txt", "LICENSE", "README.md", "pyproject.toml"} <= in_sdist
    assert top == f"distrl-{distrl.__version__}"

    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(whl.read(meta_name).decode())
    in_wheel = {n for n in names if ".dist-info/" not in n}
    expected = {p.removeprefix("src/") for p in shipped}
    assert not sorted(expected - in_wheel), f"wheel lacks {sorted(expected - in_wheel)}"
    assert not sorted(in_wheel - expected), f"wheel ships untracked {sorted(in_wheel - expected)}"

    assert meta["Version"] == distrl.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier") or []
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX field says it
    # the Python versions a test has run on (pyproject says where), and no others
    pythons = {c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")}
    assert pythons == {f"Programming Language :: Python :: 3.{v}" for v in (11, 12)}


def _fresh_venv(path: Path) -> Path:
    """A venv whose own site-packages is empty, and which sees this interpreter's site-packages
    (torch and the rest) after it through a .pth file; returns its Python."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    base = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(own, "_distrl_test_base.pth").write_text("".join(f"{p}\n" for p in sorted(base)))
    return python


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_trains(archives, tmp_path):
    _, wheel = archives
    python = _fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    work = tmp_path / "elsewhere"
    work.mkdir()
    pip = [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    _run([*pip, "--disable-pip-version-check", str(wheel)], cwd=work, env=env)

    where = _run([python, "-c", "import distrl; print(distrl.__file__)"], cwd=work, env=env)
    installed = Path(where.stdout.strip()).resolve()
    assert installed.is_relative_to((tmp_path / "venv").resolve()), installed
    assert not installed.is_relative_to(ROOT.resolve())

    exe = tmp_path / "venv" / "bin" / "distrl"
    version = _run([exe, "--version"], cwd=work, env=env)
    assert version.stdout.strip() == f"distrl {distrl.__version__}"

    start = time.monotonic()
    argv = ["train", "cartpole", "--agent.max-iterations", "3", "--env.num-envs", "16"]
    argv += ["--agent.num-steps", "8", "--threads", "1", "--progress", "False"]
    argv += ["--tensorboard", "False"]
    _run([exe, *argv, "--run-dir", str(work / "run")], cwd=work, env=env)
    lines = (work / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= 3, lines
    assert (work / "run" / "checkpoints").is_dir() or any((work / "run").glob("*.pt"))
    assert time.monotonic() - start < 120
