"""The directory of a local cluster (`./.xshard` by default): what `xshard up` leaves there for
the other commands to find.

    etcd.url     the embedded etcd's client URL (`status`, `failover`, ... use it)
    etcd.ports   "client peer": the same ports on every restart of this cluster
    cluster      the cluster name
    up.json      the shape `up` was started with, the defaults of the next `up` here
    up.pid       the pid of the `up` that runs the cluster (its supervisor)
    up.lock      flock()ed by that `up` for its whole life: a second `up` sees it at once
    up.log       the output of `up --detach`
    etcd.log, controller.log, router<i>.log, <node>/node.log
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

DEFAULT = ".xshard"


class AlreadyRunning(Exception):
    """Another `up` holds the directory; args[0] is its pid (0 when unknown)."""


class StateDir:
    def __init__(self, path: str | os.PathLike = DEFAULT) -> None:
        self.path = Path(path).resolve()
        self._lock_fd: int | None = None

    def file(self, name: str) -> Path:
        return self.path / name

    def read(self, name: str) -> str:
        """A one-line file's content; raises OSError when it is missing."""
        return self.file(name).read_text().strip()

    def write(self, name: str, text: str) -> None:
        """Write atomically (rename), so a reader never sees half a file."""
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.file(name + ".tmp")
        tmp.write_text(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, self.file(name))

    def saved(self) -> dict[str, Any]:
        """The options of the last `up` here ({} when none)."""
        try:
            v = json.loads(self.read("up.json"))
        except (OSError, ValueError):
            return {}
        return v if isinstance(v, dict) else {}

    def save(self, opts: dict[str, Any]) -> None:
        self.write("up.json", json.dumps(opts, indent=1, sort_keys=True))

    # --- the running `up` ------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the directory for this process's lifetime; raises AlreadyRunning. The kernel
        drops the lock when the process dies, however it dies, so a stale pidfile never
        blocks a new `up`."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.file("up.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise AlreadyRunning(self.running_pid() or 0) from None
        os.set_inheritable(fd, False)
        self._lock_fd = fd
        self.write("up.pid", str(os.getpid()))

    def unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                self.file("up.pid").unlink()
            os.close(self._lock_fd)
            self._lock_fd = None

    def locked(self) -> bool:
        """Whether some process holds the lock (an `up` is running here)."""
        try:
            fd = os.open(self.file("up.lock"), os.O_RDWR)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    def running_pid(self) -> int | None:
        """The pid of the `up` running here, or None."""
        if not self.locked():
            return None
        try:
            return int(self.read("up.pid"))
        except (OSError, ValueError):
            return 0

    # --- logs ------------------------------------------------------------------------------------
    def logs(self) -> dict[str, Path]:
        """Every log file here by name: up, etcd, controller, router0.., s0n0.. (existing)."""
        out: dict[str, Path] = {}
        for name in ("up", "etcd", "controller"):
            if self.file(f"{name}.log").is_file():
                out[name] = self.file(f"{name}.log")
        for p in sorted(self.path.glob("router*.log")):
            out[p.stem] = p
        for p in sorted(self.path.glob("*/node.log")):
            out[p.parent.name] = p
        return out


def local_etcd_url(path: str | os.PathLike = DEFAULT) -> str:
    """The etcd URL of the local cluster in `path`, or "" when there is none."""
    with contextlib.suppress(OSError):
        return StateDir(path).read("etcd.url")
    return ""
