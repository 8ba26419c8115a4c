"""CPU per effect of a replica applying its primary's stream, in process.

    python benchmarks/replica_apply_bench.py [--n 100000] [--rounds 5]

A replica feeds what its primary sends to `EffectApplier(republish=True)` (node/effects.py):
it applies every effect and publishes the received bytes to its own effect log (its backlog
and AOF listen there). The stream here is N live `XADD key ms-seq f1 v1 ... f5 v5` effects,
recorded from a real Server, cut two ways: `live` one effect per feed (a replica of a primary
at a few thousand writes/s receives them one read at a time) and `bulk` 64 KiB reads (a
replica catching up). `group` is the effects of one delivery of a consumer group as
e2e_bench.py makes them (an XADD, a blocked XREADGROUP served with it: XCLAIM and XGROUP
SETID, then its XACK), fed as the primary writes them: the first three in one read, the XACK
in the next; it prints CPU per delivered entry. The replica has a listener on its effect log, as one with a backlog.
Prints the best of `rounds` CPU times per effect (time.process_time), which moves less with
the machine's load than wall time; run it from two checkouts to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.client import Client  # noqa: E402
from node.config import Config  # noqa: E402
from node.effects import EffectApplier  # noqa: E402
from node.native import compiled  # noqa: E402
from node.server import Server  # noqa: E402

FIELDS = [b"f1", b"value00001", b"f2", b"value00002", b"f3", b"value00003", b"f4",
          b"value00004", b"f5", b"value00005"]


def record(n: int) -> list[bytes]:
    """N effects as a primary publishes them, one bytes object each."""
    srv = Server(Config())
    out: list[bytes] = []
    srv.effects.listen(out.append)
    c = Client(srv, None, 1)
    for i in range(n):
        srv.execute(c, [b"XADD", b"s", b"%d-1" % (1700000000000 + i), *FIELDS])
    return out


def record_group(n: int) -> list[bytes]:
    """N deliveries as the primary writes them: [XADD + XCLAIM + SETID, XACK] each."""
    srv = Server(Config())
    out: list[bytes] = []
    srv.effects.listen(out.append)
    c = Client(srv, None, 1)
    srv.execute(c, [b"XGROUP", b"CREATE", b"s", b"g", b"$", b"MKSTREAM"])
    chunks: list[bytes] = [b"".join(out)]
    for i in range(n):
        out.clear()
        sid = b"%d-1" % (1700000000000 + i)
        srv.execute(c, [b"XADD", b"s", sid, *FIELDS])
        srv.execute(c, [b"XREADGROUP", b"GROUP", b"g", b"c%d" % (i % 10), b"COUNT", b"100",
                        b"STREAMS", b"s", b">"])
        chunks.append(b"".join(out))
        out.clear()
        srv.execute(c, [b"XACK", b"s", b"g", sid])
        chunks.append(b"".join(out))
    return chunks


def apply_cpu(chunks: list[bytes], n: int) -> float:
    """CPU seconds per effect to apply and republish `chunks` on a fresh replica."""
    srv = Server(Config())
    sink: list[bytes] = []
    srv.effects.listen(sink.append)
    ap = EffectApplier(srv, republish=True)
    gc.collect()
    t0 = time.process_time()
    for ch in chunks:
        ap.feed(ch)
    cpu = time.process_time() - t0
    assert ap.errors == 0 and srv.effects.offset == sum(map(len, chunks))
    return cpu / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    asyncio.set_event_loop(asyncio.new_event_loop())
    effects = record(a.n)
    stream = b"".join(effects)
    cuts = {"live": effects,
            "bulk": [stream[i:i + 65536] for i in range(0, len(stream), 65536)]}
    print(f"{Path(__file__).resolve().parent.parent}: "
          f"{'compiled' if compiled() else 'interpreted'}, {a.n} effects")
    cuts["group"] = record_group(a.n // 4)
    for name, chunks in cuts.items():
        n = a.n // 4 if name == "group" else a.n
        what = "delivered entry" if name == "group" else "effect"
        best = min(apply_cpu(chunks, n) for _ in range(a.rounds))
        print(f"{name:5s} {best * 1e6:6.2f} us CPU per {what} ({1 / best / 1000:.0f}k/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
