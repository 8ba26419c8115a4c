"""Child processes that `xshard up` starts and keeps running: restart with backoff, and say so.

A child that exits is started again after a pause that doubles on every quick death (0.5 s,
1 s, 2 s ... 30 s) and falls back to 0.5 s once the child has run for a minute, so a crash
loop neither spins nor hides. Every exit and restart is one line on the console.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0  # a child that ran this long starts over with FIRST_BACKOFF


def say(msg: str) -> None:
    print(f"xshard up: {msg}", flush=True)


def exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class Child:
    """One supervised process; its output goes to `log_path`."""

    def __init__(self, name: str, argv: list[str], log_path: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = {**os.environ, **env} if env else None
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.backoff = FIRST_BACKOFF
        self.restart_at: float | None = None  # set while waiting to restart
        self.restarts = 0

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=self.env)
        self.started_at = time.monotonic()
        self.restart_at = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def supervise(self, now: float) -> None:
        """Notice an exit (schedule the restart) or a due restart (do it)."""
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.restarts += 1
                self.start()
                say(f"{self.name} restarted (pid {self.pid})")
            return
        if self.proc is None or self.proc.poll() is None:
            return
        if now - self.started_at >= STABLE_AFTER:
            self.backoff = FIRST_BACKOFF
        say(f"{self.name} exited ({exit_text(self.proc.returncode)}); restarting in "
            f"{self.backoff:g}s; see {self.log_path}")
        self.restart_at = now + self.backoff
        self.backoff = min(self.backoff * 2, MAX_BACKOFF)

    def last_line(self) -> str:
        try:
            tail = self.log_path.read_bytes()[-400:].decode(errors="replace")
        except OSError:
            return "(no output)"
        lines = tail.strip().splitlines()
        return lines[-1] if lines else "(no output)"

    def stop(self) -> None:
        self.restart_at = None
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()


def xshard_argv(*args: str) -> list[str]:
    """argv that runs an `xshard` subcommand with this interpreter."""
    return [sys.executable, "-m", "control.cli", *args]
