"""The partitioned-stream record in etcd (base/records.py, base/store.py): round trip,
guarded writes, and malformed values left out of the view."""

from __future__ import annotations

import asyncio

from base.memstore import MemoryEtcd, MemoryStore
from base.records import KeyValue, PStreamRecord, View


def test_record_round_trips_through_a_guarded_store() -> None:
    async def go() -> None:
        st = MemoryStore(MemoryEtcd(), "c")
        rec = PStreamRecord(2, 128, ["{a}events:0", "{b}events:1"], "user")
        assert await st.put_pstream("events", rec, 0)
        e = (await st.view()).pstreams["events"]
        assert e.value == rec
        assert not await st.put_pstream("events", rec, 0)  # exists: a create must not win
        assert not await st.delete_pstream("events", e.mod + 1)  # stale guard
        assert await st.delete_pstream("events", e.mod)
        assert "events" not in (await st.view()).pstreams
    asyncio.run(go())


def test_an_id_names_its_partition() -> None:
    rec = PStreamRecord(3, 128, ["a", "b", "c"])
    assert [rec.partition_of(s) for s in (0, 1, 2, 128, 129, 258)] == [0, 1, 2, 0, 1, 2]


def test_malformed_records_are_left_out() -> None:
    pre = b"/xshard/c/"
    bad = [b'{"partitions": 3, "stride": 2, "keys": ["a","b","c"]}',  # more than the stride
           b'{"partitions": 2, "stride": 8, "keys": ["a"]}',  # a key missing
           b'{"partitions": 0, "stride": 8, "keys": []}', b"not json"]
    kvs = [KeyValue(pre + b"pstreams/s%d" % i, v, 1, 1) for i, v in enumerate(bad)]
    kvs.append(KeyValue(pre + b"pstreams/ok", PStreamRecord(1, 8, ["k"]).encode(), 2, 2))
    assert list(View.decode(2, pre, kvs).pstreams) == ["ok"]
