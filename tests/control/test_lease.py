"""The lease session (base/lease.py) against the in-memory etcd, plus the store's
endpoint handling; the same session runs against real etcd in every test_control.py test."""

from __future__ import annotations

import asyncio

from base.etcdconn import ConfigError, EtcdConfig
from base.lease import POLICY, LeasePolicy, LeaseSession
from base.memstore import FakeClock, MemoryEtcd, MemoryStore
from base.records import NodeRecord
from tests.support.memetcd import in_memory, run, until

FAST = LeasePolicy(ttl=1, interval=0.05, rpc_timeout=0.5)




def test_one_policy_for_every_holder() -> None:
    assert (POLICY.ttl, POLICY.interval, POLICY.rpc_timeout) == (3, 1.0, 1.0)
    import control.controller
    import node.membership.agent
    import router.topology

    # None of the holders keeps a keep-alive loop or a TTL of its own any more.
    for mod in (node.membership.agent, control.controller, router.topology):
        src = open(mod.__file__).read()
        assert "keepalive(" not in src and "grant(" not in src, mod.__name__


def test_keepalives_keep_the_lease_and_close_revokes_it() -> None:
    async def go() -> None:
        clock = FakeClock()
        etcd = MemoryEtcd(clock)
        store = MemoryStore(etcd, "c")
        s = await LeaseSession.open(store, FAST)
        assert await store.put_node(NodeRecord("n", "h", 1, "0"), s.id, 0)
        for _ in range(5):  # well past the TTL in total, never a TTL between keep-alives
            clock.advance(0.6)
            deadline = etcd.leases[s.id].deadline
            await until(lambda d=deadline: etcd.leases[s.id].deadline > d, "a keep-alive")
        assert s.alive and "n" in (await store.view()).nodes
        await s.close()
        assert s.done.result() == "closed"
        assert "n" not in (await store.view()).nodes and s.id not in etcd.leases

    run(go)


@in_memory
async def test_done_resolves_when_the_lease_expires(etcd: MemoryEtcd, store: MemoryStore) -> None:
    s = await LeaseSession.open(store, FAST)
    await store.revoke(s.id)  # as if it had expired
    assert await asyncio.wait_for(s.wait(), 10) == "expired"
    assert s.age() == float("inf")
    await s.close()


@in_memory
async def test_done_resolves_after_a_ttl_without_accepted_keepalives(etcd: MemoryEtcd,
                                                                     store: MemoryStore) -> None:
    s = await LeaseSession.open(store, FAST)
    await until(lambda: s.age() < FAST.interval, "a first keep-alive")
    etcd.down = True
    await until(lambda: s.age() > FAST.interval * 3, "keep-alives failing")
    assert s.alive  # a hiccup shorter than the TTL costs nothing ...
    why = await asyncio.wait_for(s.wait(), 10)  # ... a whole TTL loses the lease
    assert why.startswith("no keep-alive accepted for 1s"), why
    etcd.down = False
    await s.close()


@in_memory
async def test_a_short_outage_is_survived(etcd: MemoryEtcd, store: MemoryStore) -> None:
    s = await LeaseSession.open(store, LeasePolicy(ttl=3, interval=0.05, rpc_timeout=0.5))
    etcd.down = True
    await until(lambda: s.age() > 0.3, "keep-alives failing")
    etcd.down = False
    await until(lambda: s.age() < 0.2, "keep-alives accepted again")
    assert s.alive
    await s.close()



def test_endpoint_lists_and_tls_options_parse() -> None:
    c = EtcdConfig.parse("http://a:1, b:2,http://c")
    assert c.endpoints == (("a", 1), ("b", 2), ("c", 2379)) and not c.tls
    assert c.url == "http://a:1,http://b:2,http://c:2379"
    assert EtcdConfig.parse("https://a:1").tls
    assert EtcdConfig.parse("a:1", cacert="/ca.pem").tls
    for bad, words in (("ftp://a", "scheme"), ("http://a:1,https://b:2", "mix"), ("", "no etcd"),
                       ("http://a:x", "bad port")):
        try:
            EtcdConfig.parse(bad)
        except ConfigError as e:
            assert words in str(e)
        else:
            raise AssertionError(bad)
    for kw in ({"user": "u"}, {"cert": "c"}):
        try:
            EtcdConfig.parse("a:1", **kw)
        except ConfigError as e:
            assert "go together" in str(e)
        else:
            raise AssertionError(kw)
