"""The run's store secret: a value distrl's ranks act on in their store counts only when it was
written by a process that holds the run's secret.

torch's ``TCPStore`` has no authentication: any process on the machine can connect to a store
on 127.0.0.1, list its keys (``list_keys``) and set any of them, and ranks act on some of
theirs (a rank told there that it was dropped leaves; rank 0 sends SIGCONT to the pid a rank
registered; the elastic launcher kills a member marked out). Hiding the keys under a secret
prefix does not help, since any client can list them. So the launcher (``distrl train --nproc
N`` on one machine) makes a random token per run (``new``), hands it to its ranks in their
environment (``SECRET_ENV``) and writes it, mode 0600, into the run directory (``write``:
``RUN/.store-secret``, removed when the run ends); distrl reaches its store through ``guard``,
which signs every value it sets with an HMAC of the key and the value under the token, and
reads a value whose tag does not verify as no value at all. A process that can read neither
the run's files nor the ranks' environment cannot write a value the ranks act on. What this
does not cover (torch's own rendezvous keys, counters, a flood of garbage, a process of the
same user) is in docs/reliability.md, "Security".
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

from distrl.safe_files import open_fd

SECRET_ENV = "DISTRL_STORE_SECRET"
"""The run's token, in the environment of the launcher's ranks (absent: values go unsigned, as
under a torchrun started by the user, or on several machines)."""
SECRET_FILE = ".store-secret"
_TAG = 32  # hex digits of the HMAC-SHA256 kept with each value (128 bits)


def new() -> str:
    """A fresh token: 128 random bits, as hex."""
    return secrets.token_hex(16)


class SignedStore:
    """A store whose values carry an HMAC of their key and bytes under the run's secret:
    ``set`` and ``compare_set`` sign, ``get`` returns a value only when its tag verifies (a
    ``KeyError`` otherwise, as for a missing key), ``check`` is true for keys that hold such
    a value. ``add`` (a counter) and ``wait`` pass through unsigned; ``raw`` is the store
    itself (torch's process groups take that)."""

    def __init__(self, raw: Any, token: str):
        self.raw = raw
        self._key = token.encode()

    def _tag(self, key: str, value: bytes) -> bytes:
        mac = hmac.new(self._key, key.encode() + b"\0" + value, hashlib.sha256)
        return mac.hexdigest()[:_TAG].encode()

    def _signed(self, key: str, value: str | bytes) -> bytes:
        data = value.encode() if isinstance(value, str) else bytes(value)
        return self._tag(key, data) + b" " + data

    def _verified(self, key: str, stored: bytes) -> bytes | None:
        tag, data = stored[:_TAG], stored[_TAG + 1 :]
        ok = len(stored) > _TAG and hmac.compare_digest(tag, self._tag(key, data))
        return data if ok else None

    def set(self, key: str, value: str | bytes) -> None:
        self.raw.set(key, self._signed(key, value))

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        return bytes(self.raw.compare_set(key, expected, self._signed(key, desired)))

    def get(self, key: str) -> bytes:
        data = self._verified(key, bytes(self.raw.get(key)))
        if data is None:
            raise KeyError(f"{key}: a value not signed with the run's secret")
        return data

    def check(self, keys: list[str]) -> bool:
        return all(
            self.raw.check([k]) and self._verified(k, bytes(self.raw.get(k))) is not None
            for k in keys
        )

    def add(self, key: str, amount: int) -> int:
        return int(self.raw.add(key, amount))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        if timeout is None:
            self.raw.wait(keys)
        else:
            self.raw.wait(keys, timeout)


def guard(store: Any) -> Any:
    """``store`` with its values signed under the run's secret (``SignedStore``); ``store``
    itself without a secret."""
    token = os.environ.get(SECRET_ENV)
    if store is None or not token:
        return store
    return SignedStore(store, token)


def raw(store: Any) -> Any:
    """The store beneath ``guard`` (what torch's own process groups are made from)."""
    return getattr(store, "raw", store)


def write(run_dir: str | os.PathLike[str], token: str) -> Path:
    """``token`` as ``run_dir/.store-secret``, readable by this user only (never through a
    symbolic link: ``safe_files``)."""
    path = Path(run_dir).expanduser() / SECRET_FILE
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file left by an earlier run may have had wider modes
        os.write(fd, f"{token}\n".encode())
    finally:
        os.close(fd)
    return path


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
