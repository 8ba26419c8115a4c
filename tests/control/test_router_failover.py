"""A primary SIGKILLed under a write load that goes through a router (issue 6): the client sees
latency, no errors, and every write that WAIT acknowledged is on the new primary."""

from __future__ import annotations

import threading
import time

import pytest
import redis

pytestmark = [pytest.mark.etcd, pytest.mark.failover]


def test_sigkill_of_a_primary_under_load_through_a_router(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1, routers=1,
                 router_args=("--cluster-down-timeout-ms", "8000"))
    router = c.router
    acked: list[tuple[str, bytes]] = []
    errors: list[str] = []
    latencies: list[float] = []
    stop = threading.Event()
    lock = threading.Lock()

    def writer(w: int) -> None:
        r = redis.Redis(port=router.port, socket_timeout=15, protocol=2)
        i = 0
        while not stop.is_set():
            key = f"w{w}-{i % 8}"
            t0 = time.monotonic()
            try:
                eid = r.xadd(key, {"w": w, "i": i})
                n = r.execute_command("WAIT", 1, 2000)
            except redis.RedisError as e:
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                i += 1
                continue
            with lock:
                latencies.append(time.monotonic() - t0)
                if n >= 1:
                    acked.append((key, eid))
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        victim = c.primary_id("0")
        assert victim is not None
        before = len(acked)
        c.nodes[victim].kill()
        c.wait_for(lambda v: v.shards["0"].value.primary not in (None, victim), 15,
                   "a new primary for shard 0")
        c.nodes[victim].start()  # back as a replica, so WAIT 1 can be satisfied again
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:5]
    assert len(acked) > before + 10, "writes did not resume after the failover"
    r = router.client()
    present: dict[str, set[bytes]] = {}
    for key in {k for k, _ in acked}:
        present[key] = {eid for eid, _ in r.xrange(key)}
    lost = [(k, e) for k, e in acked if e not in present[k]]
    assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:3]}"
    print(f"acked {len(acked)} writes, longest XADD+WAIT {max(latencies):.2f} s")
