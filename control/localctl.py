"""`xshard down` and `xshard logs`: act on the local cluster that `xshard up` runs in a
directory (./.xshard by default), through what it leaves there (base/statedir.py)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from base.statedir import DEFAULT as STATE_DIR
from base.statedir import StateDir
from control.clusterctl import CliError


def _parser(prog: str, desc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"xshard {prog}", description=desc)
    p.add_argument("--dir", default=STATE_DIR, help="the directory `xshard up` was given "
                   f"(default: {STATE_DIR})")
    return p


# --- down ----------------------------------------------------------------------------------------

def cmd_down(argv: list[str]) -> int:
    p = _parser("down", "Stop the local cluster that `xshard up` runs (in the background or "
                "in another terminal) in this directory.")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for everything to stop (default: 60)")
    a = p.parse_args(argv)
    sd = StateDir(a.dir)
    pid = sd.running_pid()
    if pid is None:
        raise CliError(f"no cluster running in {sd.path}")
    if pid == 0:
        raise CliError(f"{sd.path} is locked by a process that left no pidfile")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + a.timeout
    while sd.locked():
        if time.monotonic() > deadline:
            raise CliError(f"xshard up (pid {pid}) is still stopping after {a.timeout:g}s")
        time.sleep(0.1)
    print(f"stopped the cluster in {sd.path} (pid {pid})")
    return 0


# --- logs ----------------------------------------------------------------------------------------

def _tail(path: Path, n: int | None) -> tuple[list[str], int]:
    """The last n lines (all when None) and the size read up to."""
    data = path.read_bytes()
    lines = data.decode(errors="replace").splitlines()
    return (lines if n is None else lines[-n:] if n else []), len(data)


def _names_help(argv: list[str]) -> str:
    """NAME's help: the logs that exist in the directory the command line names (its --dir,
    else ./.xshard), so `xshard logs --help` offers only names that work."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--dir", default=STATE_DIR)
    names = list(StateDir(pre.parse_known_args(argv)[0].dir).logs())
    if names:
        return f"one of: {', '.join(names)} (default: all)"
    return ("a process of the local cluster: etcd, controller, router0, s0n0, ...; up too "
            "with up --detach (none here yet; default: all)")


def _select(sd: StateDir, name: str | None) -> dict[str, Path]:
    """The logs to show: every one, or the one named (an unknown name lists the others)."""
    logs = sd.logs()
    if not logs:
        raise CliError(f"no logs in {sd.path} (xshard up keeps them there)")
    if name is None:
        return logs
    if name not in logs:
        raise CliError(f"no log '{name}' in {sd.path} (there are: {', '.join(logs)})")
    return {name: logs[name]}


class _Printer:
    """Prints log lines, each prefixed with its log's name when several are shown."""

    def __init__(self, names: list[str], prefixed: bool) -> None:
        self.prefixed = prefixed
        self.width = max(len(n) for n in names)

    def add(self, name: str) -> None:
        self.width = max(self.width, len(name))

    def __call__(self, name: str, line: str) -> None:
        print(f"{name:<{self.width}} | {line}" if self.prefixed else line)


def _follow(sd: StateDir, logs: dict[str, Path], offsets: dict[str, int], out: _Printer,
            every: bool) -> None:
    """Print what is appended to the logs (and, with `every`, the logs that appear), until
    Ctrl-C; a truncated or replaced log starts over."""
    partial: dict[str, bytes] = {}
    while True:
        if every:  # logs that appeared since (a node that started later)
            for name, path in sd.logs().items():
                if name not in logs:
                    logs[name], offsets[name] = path, 0
                    out.add(name)
        for name, path in logs.items():
            for line in _appended(path, name, offsets, partial):
                out(name, line)
        sys.stdout.flush()
        time.sleep(0.2)


def _appended(path: Path, name: str, offsets: dict[str, int],
              partial: dict[str, bytes]) -> list[str]:
    """The complete lines appended to one log since offsets[name] (a torn last line waits)."""
    try:
        size = path.stat().st_size
    except OSError:
        return []
    if size < offsets[name]:  # truncated or replaced: start over
        offsets[name] = 0
    if size == offsets[name]:
        return []
    with open(path, "rb") as f:
        f.seek(offsets[name])
        data = partial.pop(name, b"") + f.read()
    offsets[name] = size
    *complete, rest = data.split(b"\n")
    if rest:
        partial[name] = rest
    return [raw.decode(errors="replace") for raw in complete]


def cmd_logs(argv: list[str]) -> int:
    p = _parser("logs", "Show the logs of the local cluster's processes: every one, each line "
                "prefixed with its name, or the one named.")
    p.add_argument("name", nargs="?", metavar="NAME", help=_names_help(argv))
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing what is appended, until Ctrl-C")
    p.add_argument("-n", "--lines", type=int, default=None, metavar="N",
                   help="only the last N lines of each log (default: all)")
    p.add_argument("--list", action="store_true", help="print the names of the logs there "
                   "are, one a line, and exit")
    a = p.parse_args(argv)
    sd = StateDir(a.dir)
    logs = _select(sd, a.name)
    if a.list:
        print("\n".join(logs))
        return 0
    out = _Printer(list(logs), prefixed=a.name is None)
    offsets: dict[str, int] = {}
    for name, path in logs.items():
        lines, offsets[name] = _tail(path, a.lines)
        for line in lines:
            out(name, line)
    sys.stdout.flush()
    if a.follow:
        try:
            _follow(sd, logs, offsets, out, every=a.name is None)
        except KeyboardInterrupt:
            pass
    return 0


COMMANDS = {"down": cmd_down, "logs": cmd_logs}


def run(cmd: str, argv: list[str]) -> int:
    try:
        return COMMANDS[cmd](argv)
    except SystemExit as e:
        return int(e.code or 0)
    except CliError as e:
        print(f"xshard {cmd}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `xshard logs | head`
        return 0
