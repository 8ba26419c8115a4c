"""redis-cli, the tool people reach for first, gets the same output from the node as from Redis."""

from __future__ import annotations

import shutil
import subprocess

import pytest

REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed (redis-tools)")

SCRIPT = [
    ["XADD", "cli", "1-1", "sensor", "a", "temp", "20"],
    ["XADD", "cli", "2-1", "sensor", "b", "temp", "21"],
    ["XLEN", "cli"],
    ["XRANGE", "cli", "-", "+"],
    ["XREVRANGE", "cli", "+", "-", "COUNT", "1"],
    ["XGROUP", "CREATE", "cli", "g", "0"],
    ["XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "cli", ">"],
    ["XPENDING", "cli", "g"],
    ["XACK", "cli", "g", "1-1"],
    ["XREAD", "COUNT", "5", "STREAMS", "cli", "0"],
    ["XADD", "cli", "1-0", "x", "y"],
    ["XTRIM", "cli", "MAXLEN", "1"],
    ["TYPE", "cli"],
    ["NOSUCHCMD"],
    ["DEL", "cli"],
]


def _cli(port: int, args: list[str], *flags: str) -> str:
    p = subprocess.run([REDIS_CLI, "-p", str(port), *flags, *args], capture_output=True,
                       text=True, timeout=20)
    return p.stdout + p.stderr


@pytest.mark.parametrize("flags", [(), ("-3",)], ids=["resp2", "resp3"])
def test_redis_cli_output_matches(node, oracle, flags):
    for args in SCRIPT:
        assert _cli(node.port, args, *flags) == _cli(oracle.port, args, *flags), args


def test_redis_cli_pipe_mode(node):
    """`redis-cli --pipe` bulk-loads through the raw protocol, as users import data."""
    payload = "".join(f"XADD pipe {i}-1 n {i}\r\n" for i in range(1, 2001))
    p = subprocess.run([REDIS_CLI, "-p", str(node.port), "--pipe"], input=payload,
                       capture_output=True, text=True, timeout=60)
    assert "errors: 0, replies: 2000" in p.stdout, p.stdout + p.stderr
    assert _cli(node.port, ["XLEN", "pipe"]).strip() == "2000"
    _cli(node.port, ["DEL", "pipe"])
