"""CPU instructions per XADD on the node's command path, counted by callgrind.

    python benchmarks/xadd_instructions.py [--n 10000] [--pipeline 100] [--tree DIR ...]

Wall-clock throughput on this shared 2-core machine moves by more than the few per cent a
change to the hot path costs; an instruction count does not. The script runs the node's real
connection path in process (node/server.py Connection fed by a transport that keeps nothing:
hiredis parsing, dispatch, the handler, commandstats, the reply write) under
`valgrind --tool=callgrind`, once with --n XADDs and once with none, and prints the
difference divided by --n. `--tree` names checkouts to measure side by side (this one by
default), e.g. `--tree /path/to/main --tree .` for before and after a change.

`--run N` is the in-process part (what valgrind runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = [tok for i in range(1, 6) for tok in (f"f{i}", f"value{i:05d}")]


class NullTransport(asyncio.Transport):
    """Takes every write and drops it; the peer names a fixed address."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


def run(n: int, pipeline: int) -> None:
    """Feed `n` XADDs (5 field pairs) in batches of `pipeline` through one connection."""
    from node.config import Config
    from node.resp import encode_command
    from node.server import Connection, Server

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    cfg = Config()
    # Under callgrind a command runs some 50x slower, so XADDs would cross SLOWLOG's 10 ms
    # and be logged, which they are not at full speed; the comparison with the threshold is
    # still made on every call.
    cfg.slowlog_log_slower_than = -1
    server = Server(cfg)
    conn = Connection(server)
    conn.connection_made(NullTransport())
    batch = encode_command([b"XADD", b"s", b"*", *(f.encode() for f in FIELDS)]) * pipeline
    conn.data_received(batch)  # warm: the key exists, the first-call paths ran
    for _ in range(n // pipeline):
        conn.data_received(batch)


def _instructions(n: int, pipeline: int, tree: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, __file__, "--run", str(n), "--pipeline", str(pipeline),
                        "--tree", tree],
                       check=True, capture_output=True)
        text = Path(out).read_text()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    assert m, "no total in the callgrind output"
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--pipeline", type=int, default=100)
    ap.add_argument("--tree", action="append", default=None,
                    help="a checkout to measure (repeatable; default: this one)")
    ap.add_argument("--run", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in args.tree or [Path(__file__).parent.parent]]
    if args.run is not None:
        sys.path.insert(0, trees[0])
        run(args.run, args.pipeline)
        return
    for tree in trees:
        base = _instructions(0, args.pipeline, tree)
        total = _instructions(args.n, args.pipeline, tree)
        print(f"{tree}: {(total - base) / args.n:.0f} instructions per XADD "
              f"(n={args.n}, pipeline={args.pipeline})", flush=True)


if __name__ == "__main__":
    main()
