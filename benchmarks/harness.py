"""Shared helpers for the benchmarks: start servers, wait for PING, read /proc, talk raw RESP.

Everything here binds and connects to 127.0.0.1 only. Every server started through this
module is registered for an atexit kill, so an exception or Ctrl-C in a benchmark never
leaves a redis-server or node process behind (the caller should still stop() in a finally).
"""

from __future__ import annotations

import argparse
import atexit
import csv
import datetime as _dt
import io
import math
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import hiredis

from control.ports import free_port  # noqa: F401 - re-exported for the benchmarks

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")

_started: list[ServerProc] = []


def proc_status_kib(pid: int, name: str) -> int:
    """A kB field of /proc/<pid>/status (VmRSS, VmSize, ...) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {name} for pid {pid}")


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (what the kernel actually holds)."""
    return proc_status_kib(pid, "VmRSS")


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process (all its threads) in seconds, from /proc/<pid>/stat.

    Used to check whether the server under test was saturated during a measurement: a server
    that used well under one core was waiting on the load generator, not the other way round.
    """
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    # The command name (field 2) may contain spaces; the fields we want follow the last ')'.
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent busy since boot (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def own_cpu_seconds() -> float:
    """CPU seconds used by this process and its reaped children (load generators)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def wait_for_idle(max_wait: float, busy_cores: float = 0.3, window: float = 1.0) -> float:
    """Wait until the whole machine used under `busy_cores` cores for one `window`.

    Returns the busy level of the last window (in cores). Gives up after `max_wait` seconds:
    the caller then measures anyway and the OthersMeter figure says how noisy it was.
    """
    deadline = time.monotonic() + max_wait
    while True:
        b0 = machine_busy_seconds()
        time.sleep(window)
        level = (machine_busy_seconds() - b0) / window
        if level < busy_cores or time.monotonic() >= deadline:
            return level


class OthersMeter:
    """How busy the machine was with work that is neither the server nor our load generators.

    The machine is shared (2 cores); a figure taken while something else ran is suspect. The
    result is in percent of one core, averaged over the measured interval.
    """

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.pct = 0.0

    def __enter__(self) -> OthersMeter:
        self._t0 = time.perf_counter()
        self._m0, self._s0 = machine_busy_seconds(), cpu_seconds(self.server_pid)
        self._o0 = own_cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        busy = machine_busy_seconds() - self._m0
        ours = (cpu_seconds(self.server_pid) - self._s0) + (own_cpu_seconds() - self._o0)
        self.pct = max(0.0, 100.0 * (busy - ours) / wall)


class ServerProc:
    """One server process under test (redis-server or our node) and how to reach it."""

    def __init__(self, label: str, kind: str, port: int, proc: subprocess.Popen,
                 workdir: Path, log_path: Path, owns_workdir: bool) -> None:
        self.label = label  # what the tables call it, e.g. "redis-server" / "xshard node"
        self.kind = kind  # "redis" or "node"
        self.port = port
        self.proc = proc
        self.workdir = workdir
        self.log_path = log_path
        self._owns_workdir = owns_workdir

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def connect(self, timeout: float = 30.0) -> Conn:
        return Conn(self.port, timeout=timeout)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Kill the process (SIGTERM, then SIGKILL) and remove its private directory."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self in _started:
            _started.remove(self)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _kill_all() -> None:
    for s in list(_started):
        try:
            s.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_kill_all)


def _pin(cpu: int | None):
    """preexec_fn that pins the child to one CPU, so the server never shares with the load."""
    if cpu is None:
        return None

    def f() -> None:
        os.sched_setaffinity(0, {cpu})

    return f


def start_server(kind: str, *, label: str | None = None, port: int | None = None,
                 workdir: Path | None = None, cpu: int | None = None,
                 timeout: float = 20.0, extra: tuple[str, ...] = ()) -> ServerProc:
    """Start redis-server ("redis") or our node ("node") on loopback and wait until it PINGs.

    redis-server runs with persistence off (`--save '' --appendonly no`) so it measures the
    same thing as a node with nothing to persist. Retries once on a port race.
    """
    for attempt in range(3):
        p = port or free_port()
        owns = workdir is None
        wd = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-")) if workdir is None else workdir
        log_path = wd / "server.log"
        if kind == "redis":
            exe = shutil.which("redis-server") or "/usr/bin/redis-server"
            argv = [exe, "--port", str(p), "--bind", HOST, "--save", "", "--appendonly", "no",
                    "--daemonize", "no", "--dir", str(wd), "--logfile", "", *extra]
            env = None
        elif kind == "node":
            argv = [sys.executable, "-m", "control.cli", "node", "--port", str(p),
                    "--dir", str(wd), *extra]
            env = dict(os.environ)
            env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        else:
            raise ValueError(f"unknown server kind {kind!r}")
        log = open(log_path, "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=REPO_ROOT, env=env, preexec_fn=_pin(cpu))
        log.close()
        sp = ServerProc(label or kind, kind, p, proc, wd, log_path, owns)
        _started.append(sp)
        try:
            wait_for_ping(p, timeout, proc)
            return sp
        except RuntimeError:
            tail = sp.log_tail()
            sp.stop()
            if port is None and attempt < 2 and "in use" in tail.lower():
                continue
            raise RuntimeError(f"{kind} on port {p} did not answer PING:\n{tail}") from None
    raise AssertionError("unreachable")


def wait_for_ping(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Poll until the server on `port` answers PING with +PONG, or raise RuntimeError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            with Conn(port, timeout=1.0) as c:
                if c.call(b"PING") == b"PONG":
                    return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no PONG from port {port} within {timeout}s")


class Conn:
    """A minimal blocking RESP2 connection: hiredis for parsing, bytes in, Python values out.

    Deliberately thin (no redis-py) so that the load generators cost as little CPU per
    request as Python allows. Errors come back as hiredis.ReplyError values, not raised,
    unless `call()` is used.
    """

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def read_reply(self):
        """Block until one complete reply is available and return it."""
        while True:
            r = self.reader.gets()
            if r is not False:
                return r
            data = self.sock.recv(1 << 18)
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)

    def read_replies(self, n: int) -> list:
        return [self.read_reply() for _ in range(n)]

    def call(self, *args: bytes | str | int):
        """Send one command and return its reply; raise on an error reply."""
        self.send(hiredis.pack_command(args))
        r = self.read_reply()
        if isinstance(r, hiredis.ReplyError):
            raise r
        return r

    def pipeline(self, commands: list[tuple]) -> list:
        """Send many commands in one write and return their replies (errors not raised)."""
        self.send(b"".join(hiredis.pack_command(c) for c in commands))
        return self.read_replies(len(commands))


def info_fields(conn: Conn, section: str = "memory") -> dict[str, str]:
    """INFO <section> as a dict of strings (empty if the server does not implement it)."""
    try:
        raw = conn.call(b"INFO", section)
    except hiredis.ReplyError:
        return {}
    out: dict[str, str] = {}
    for line in raw.decode(errors="replace").splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def redis_benchmark(port: int, args: list[str], *, timeout: float,
                    cpu: int | None = None) -> float:
    """Run redis-benchmark with --csv against `port` and return its requests per second.

    `args` is everything after the connection options (e.g. ["-c", "50", "-n", "1000",
    "XADD", "s", "*", ...]). A run that exceeds `timeout` is killed and raises.
    """
    exe = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
    argv = [exe, "-h", HOST, "-p", str(port), "--csv", *args]
    res = subprocess.run(argv, capture_output=True, timeout=timeout, preexec_fn=_pin(cpu),
                         stdin=subprocess.DEVNULL)
    text = res.stdout.decode(errors="replace")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and r[0] != "test"]
    if res.returncode != 0 or not rows:
        raise RuntimeError(f"redis-benchmark failed (rc={res.returncode}): "
                           f"{text[-500:]} {res.stderr.decode(errors='replace')[-500:]}")
    return float(rows[-1][1])


# --------------------------------------------------------------------------------------------
# The side-by-side results table every node-vs-redis benchmark writes


@dataclass
class ResultRow:
    """One row of a results table: the same figure measured on both servers."""

    measurement: str
    metric: str
    better: str  # "higher" or "lower"
    values: dict[str, float] = field(default_factory=dict)  # server role -> value
    cpu: dict[str, float] = field(default_factory=dict)  # server role -> server CPU %
    others: dict[str, float] = field(default_factory=dict)  # role -> CPU % of other work


def fmt(v: float | None, small: str = ".3f") -> str:
    """A table cell: thousands separated, fewer decimals the larger the figure, n/a for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return format(v, small)


def redis_version() -> str:
    """redis-server's version line without the build details (sha, malloc, bits)."""
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return out.split(" sha")[0].strip()


def results_head(title: str, script: str, argv: list[str]) -> list[str]:
    """A results page's title, date and the exact command line that produced it."""
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return [f"# {title}", "", f"- Date: {now}",
            f"- Command: `{shlex.join(['python', f'benchmarks/{script}', *argv])}`"]


def measurement_list(ap: argparse.ArgumentParser, only: str, known: Iterable[str]) -> list[str]:
    """--only's comma list, refused through `ap` (usage and exit 2) if it names an unknown one."""
    names = [s.strip() for s in only.split(",") if s.strip()]
    unknown = [s for s in names if s not in known]
    if unknown:
        ap.error(f"unknown measurement(s): {', '.join(unknown)}")
    return names


def machine_line(load_before: float, server_cpu: int | None, load_cpu: int | None,
                 load_note: str = "") -> str:
    """The results' `Machine:` line: cores, load at start, Python, CPU pinning."""
    return (f"- Machine: {os.cpu_count()} CPUs, load average {load_before:.2f} at start{load_note}, "
            f"Python {platform.python_version()}, "
            + (f"servers pinned to CPU {server_cpu}, load generators to CPU {load_cpu}"
               if server_cpu is not None else "no CPU pinning"))


def ratio_table(rows: list[ResultRow], a: str, b: str, small: str = ".3f") -> list[str]:
    """Markdown table of `rows` with b/a ratios; `a` is the reference server's label."""
    lines = [f"| measurement | metric | {a} | {b} | ratio | better | srv CPU {a} / {b} "
             "| others' CPU |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        va, vb = r.values.get(a), r.values.get(b)
        ratio = vb / va if va and vb is not None and not math.isnan(va) and not math.isnan(vb) \
            else None
        ca, cb = r.cpu.get(a, math.nan), r.cpu.get(b, math.nan)
        cpu = "" if math.isnan(ca) and math.isnan(cb) else f"{fmt(ca)}% / {fmt(cb)}%"
        oth = "/".join(f"{r.others[k]:.0f}%" for k in (a, b) if k in r.others)
        lines.append(f"| {r.measurement} | {r.metric} | {fmt(va, small)} | {fmt(vb, small)} | "
                     f"{'n/a' if ratio is None else f'{ratio:.2f}'} | {r.better} | {cpu} "
                     f"| {oth} |")
    return lines


# --------------------------------------------------------------------------------------------
# A results page written by a one-off benchmark (fuzzing, limits)


def list_section(title: str, items: list[str]) -> list[str]:
    """A results page's `## title` section listing `items` (notes, failures); none without
    items."""
    return ["", f"## {title}", "", *[f"- {x}" for x in items]] if items else []


def run_stamp(command: str, load_at_start: float) -> str:
    """The line under a results page's title: the command, the UTC date, cores and load."""
    return (f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} CPUs, load average at start {load_at_start:.1f}.")


# Everything from this line on in a results file is notes written by hand (before/after
# comparisons, analysis): a script rewriting the file keeps them under its new figures.
KEEP_MARK = "<!-- kept: the notes below are written by hand; the script keeps them -->"


def finish_results(lines: list[str], path: Path, write: bool = True) -> str:
    """End a results page with the load at the end (other work skews the figures), print it
    and, unless `write` is false, write it to `path`, keeping the notes below KEEP_MARK."""
    text = "\n".join([*lines, "", f"Load average at the end: {os.getloadavg()[0]:.1f}."]) + "\n"
    print(text)
    if write:
        old = path.read_text() if path.exists() else ""
        at = old.find(KEEP_MARK)
        path.write_text(text if at < 0 else text + "\n" + old[at:])
    return text
