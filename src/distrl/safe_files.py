"""Opening a file distrl writes in place (a run directory's ``.lock``, ``metrics.jsonl``, an
export's metadata) without following a symbolic link: a run directory may be someone else's
(copied, unpacked), and a link in it must not make distrl write to a file outside it.

Writes through a temporary file and ``os.replace`` need none of this: the rename replaces a
link at the destination, never its target. This module imports only the standard library.
"""

from __future__ import annotations

import os
from typing import IO, Any

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_MODES = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}


class SymlinkRefused(ValueError, OSError):
    """A file distrl would write is a symbolic link (a ValueError, as distrl's other refusals
    of bad input, and an OSError, as the failed open it is)."""


def open_fd(path: str | os.PathLike[str], flags: int, perms: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW, perms)``: a descriptor of ``path`` itself, refused
    (``SymlinkRefused``, naming the path) when ``path`` is a symbolic link, before anything
    is created, truncated or written."""
    try:
        if not _NOFOLLOW and os.path.islink(path):  # no O_NOFOLLOW on this system
            raise OSError(f"{os.fspath(path)} is a symbolic link")
        return os.open(path, flags | _NOFOLLOW, perms)
    except OSError:
        if not os.path.islink(path):
            raise  # another failure (permissions, a missing directory): its own error
        target = os.readlink(path)
        raise SymlinkRefused(
            f"{os.fspath(path)} is a symbolic link (to {target}); distrl will not write "
            f"through a symbolic link, which could reach a file outside the run directory: "
            f"remove it (or replace it by a regular file) and run again"
        ) from None


def safe_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode, **kwargs)`` for writing (``mode`` "w" or "a", with "b" for bytes)
    that refuses a symbolic link at ``path`` (``open_fd``) instead of following it."""
    flags = _MODES.get(mode.replace("b", ""))
    if flags is None:
        raise ValueError(f"safe_open: mode {mode!r}; use 'w', 'a', 'wb' or 'ab'")
    fd = open_fd(path, flags)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def replace_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` as the file ``path``, written to a temporary beside it and renamed over it: a
    symbolic link at ``path`` is replaced, never followed (nor is one at the temporary's name,
    ``open_fd``)."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    with safe_open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
