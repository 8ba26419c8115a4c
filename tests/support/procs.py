"""Spawn, probe and reap server processes for tests.

Modelled on Redis `tests/support/server.tcl` (start_server): pick a free port, spawn with
stdout/stderr captured to a log file, wait until the server answers PING (with a deadline),
retry on a fresh port when another process grabbed ours in between (the port race), dump the
log on failure, and at the end stop with SIGTERM then SIGKILL. Nothing here knows about pytest,
so the cluster fixtures (etcd, routers, controllers) reuse it with their own argv and probe.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from control.ports import free_port

__all__ = [
    "LOCALHOST", "ProcessError", "ServerProcess", "free_port", "resp_ping_probe",
    "tcp_probe", "wait_until",
]

LOCALHOST = "127.0.0.1"

# Text that a server prints when bind() lost the port race (redis-server, asyncio, Go's etcd).
_PORT_RACE_MARKERS = ("address already in use", "errno 98", "eaddrinuse")


class ProcessError(RuntimeError):
    """A spawned process failed to start or died; the message carries the tail of its log."""


def resp_ping_probe(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a RESP server on host:port answers PING.

    -NOAUTH (requirepass set) also proves the server is serving; -LOADING does not.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(256)
                if not chunk:
                    return False
                data += chunk
    except OSError:
        return False
    return data.startswith((b"+PONG", b"-NOAUTH", b"-ERR AUTH", b"-WRONGPASS"))


def tcp_probe(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port (for non-RESP servers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.05,
               what: str = "condition") -> None:
    """Poll `pred` until it is true or raise TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


class ServerProcess:
    """One spawned server process listening on one port.

    `make_argv(port)` builds the command line for a given port, so that a lost port race can
    be retried on a fresh port. All output goes to `log_path` (appended across restarts, so a
    crash before a restart stays visible). The process gets its own session, so a Ctrl-C of
    pytest does not reach it half-way and teardown decides how it ends.
    """

    def __init__(
        self,
        name: str,
        make_argv: Callable[[int], Sequence[str]],
        log_path: Path,
        *,
        port: int | None = None,
        host: str = LOCALHOST,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        probe: Callable[[str, int], bool] = resp_ping_probe,
        ready_timeout: float = 30.0,
        port_retries: int = 3,
    ) -> None:
        self.name = name
        self.make_argv = make_argv
        self.log_path = Path(log_path)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self._fixed_port = port is not None
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.probe = probe
        self.ready_timeout = ready_timeout
        self.port_retries = port_retries
        self.popen: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Spawn and wait until the probe succeeds; on a port race retry on a new port."""
        attempts = 1 if self._fixed_port else max(1, self.port_retries)
        for attempt in range(attempts):
            log_offset = self._log_size()
            self._spawn()
            try:
                self._wait_ready(log_offset)
                return self
            except _PortRace:
                self._reap(timeout=2.0)
                if attempt + 1 >= attempts:
                    raise ProcessError(self._failure("lost the port race on every attempt")) from None
                self.port = free_port(self.host)
        raise AssertionError("unreachable")

    def restart(self) -> ServerProcess:
        """Stop gracefully (if running) and start again on the same port, same argv."""
        self.stop()
        self._fixed_port = True
        return self.start()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code (None if never run)."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        return self._reap(timeout)

    def kill(self) -> int | None:
        """SIGKILL at once, as a crash would: no shutdown code runs."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
        return self._reap(timeout=10.0)

    def signal(self, sig: int) -> None:
        """Send an arbitrary signal (SIGSTOP/SIGCONT to simulate a hung process)."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    # -- state -----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "alive" if self.alive else f"exited({self.returncode})"
        return f"<ServerProcess {self.name} {self.host}:{self.port} pid={self.pid} {state}>"

    # -- internals -------------------------------------------------------------------------

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _spawn(self) -> None:
        self.argv = [str(a) for a in self.make_argv(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} start {self.argv!r}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.cwd, env=self.env, start_new_session=True,
            )

    def _wait_ready(self, log_offset: int) -> None:
        assert self.popen is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self.popen.poll() is not None:
                if not self._fixed_port and self._lost_port_race(log_offset):
                    raise _PortRace
                raise ProcessError(self._failure(f"exited with code {self.popen.returncode} "
                                                 "before answering"))
            if self.probe(self.host, self.port):
                # Someone else may own the port while ours is still starting: make sure our
                # process is still alive after the probe succeeded.
                time.sleep(0.01)
                if self.popen.poll() is None:
                    return
                continue
            if time.monotonic() >= deadline:
                self.kill()
                raise ProcessError(self._failure(
                    f"did not answer on {self.host}:{self.port} within {self.ready_timeout:.0f}s"))
            time.sleep(0.05)

    def _lost_port_race(self, log_offset: int) -> bool:
        with open(self.log_path, "rb") as f:
            f.seek(log_offset)
            text = f.read().decode(errors="replace").lower()
        return any(m in text for m in _PORT_RACE_MARKERS)

    def _reap(self, timeout: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with open(self.log_path, "ab") as log:
                log.write(f"==== did not exit {timeout:.0f}s after SIGTERM: SIGKILL\n".encode())
            self.popen.kill()
            return self.popen.wait(10.0)

    def _failure(self, what: str) -> str:
        return (f"{self.name} ({' '.join(self.argv)}) {what}.\n"
                f"---- last lines of {self.log_path} ----\n{self.log_tail()}\n---- end of log ----")


class _PortRace(Exception):
    pass
