"""Unit tests of node/stream.py, the stream data structure (no server, no RESP).

Three references:
- `RefStream` below: a slow, literal transcription of t_stream.c's streamAppendItem,
  streamTrim and XDEL over a literal listpack model (every element kept and sized by its real
  encoding). Hypothesis drives random operation sequences through it and through `Stream`.
- redis-server itself (the `oracle` fixture): node boundaries (`radix-tree-keys`) and `~`
  trims for the same entries under several stream-node-max-entries/bytes settings.
- Direct checks of the packed layouts (ID shifts, string length arrays, flags), the reopening
  of a sealed node, persistence state round trips, and the memory footprint.
"""

from __future__ import annotations

import gc
import random
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.stream import MAX_ID, SEQ_MAX, ElementsTooLarge, IDTooSmall, Stream
from node.streamnodes import Block, Tail


def sid(ms: int, seq: int = 0) -> int:
    return ms << 64 | seq


def fid(x: int) -> bytes:
    return b"%d-%d" % (x >> 64, x & SEQ_MAX)


# --- a literal listpack model -----------------------------------------------------------------
def _int_enc_len(v: int) -> int:
    if 0 <= v <= 127:
        return 1
    if -4096 <= v <= 4095:
        return 2
    if -32768 <= v <= 32767:
        return 3
    if -8388608 <= v <= 8388607:
        return 4
    if -(1 << 31) <= v < (1 << 31):
        return 5
    return 9


def _lp_string_to_int64(b: bytes) -> int | None:
    # listpack.c lpStringToInt64, transcribed
    if len(b) == 0 or len(b) >= 21:
        return None
    if b == b"0":
        return 0
    p = 0
    neg = False
    if b[0:1] == b"-":
        neg = True
        p = 1
        if p == len(b):
            return None
    if not (49 <= b[p] <= 57):
        return None
    v = 0
    while p < len(b) and 48 <= b[p] <= 57:
        v = v * 10 + b[p] - 48
        p += 1
    if p < len(b):
        return None
    if neg:
        return -v if v <= 1 << 63 else None
    return v if v < 1 << 63 else None


def lp_elem_size(x: int | bytes) -> int:
    """Encoded size + backlen of one listpack element, as lpInsert computes it."""
    if isinstance(x, bytes):
        v = _lp_string_to_int64(x)
        if v is None:
            n = len(x)
            enc = 1 + n if n < 64 else (2 + n if n < 4096 else 5 + n)
        else:
            enc = _int_enc_len(v)
    else:
        enc = _int_enc_len(x)
    if enc <= 127:
        bl = 1
    elif enc < 16383:
        bl = 2
    elif enc < 2097151:
        bl = 3
    elif enc < 268435455:
        bl = 4
    else:
        bl = 5
    return enc + bl


def _i64(x: int) -> int:
    x &= SEQ_MAX
    return x - (1 << 64) if x >= 1 << 63 else x


class RefNode:
    def __init__(self, master_id: int, fields: list[bytes]) -> None:
        self.master_id = master_id
        self.master = fields[0::2]
        self.count = 0
        self.deleted = 0
        self.entries: list[list] = []  # [id, fields, flags]
        self.elems: list[int | bytes] = [len(self.master), *self.master, 0]  # after counters

    def lp_bytes(self) -> int:
        return 7 + lp_elem_size(self.count) + lp_elem_size(self.deleted) + sum(
            lp_elem_size(e) for e in self.elems)


class RefStream:
    """t_stream.c, transcribed without any cleverness."""

    def __init__(self) -> None:
        self.nodes: list[RefNode] = []
        self.length = 0
        self.last_id = 0
        self.first_id = 0
        self.max_deleted = 0

    def append(self, xid: int, fields: list[bytes], max_entries: int, max_bytes: int) -> None:
        assert xid > self.last_id
        tot = sum(len(f) for f in fields)
        lp = self.nodes[-1] if self.nodes else None
        if lp is not None:
            mb = max_bytes if 0 < max_bytes <= 1 << 30 else 1 << 30
            if lp.lp_bytes() + tot >= mb or (max_entries and lp.count + lp.deleted >= max_entries):
                lp = None
        flags = 0
        if lp is None:
            lp = RefNode(xid, fields)
            self.nodes.append(lp)
            flags = 2
        elif fields[0::2] == lp.master:
            flags = 2
        ms, seq = xid >> 64, xid & SEQ_MAX
        mms, mseq = lp.master_id >> 64, lp.master_id & SEQ_MAX
        el: list[int | bytes] = [flags, _i64(ms - mms), _i64(seq - mseq)]
        nf = len(fields) // 2
        if flags & 2:
            el += fields[1::2]
            el.append(nf + 3)
        else:
            el.append(nf)
            el += fields
            el.append(2 * nf + 4)
        lp.elems += el
        lp.count += 1
        lp.entries.append([xid, fields, flags])
        self.length += 1
        self.last_id = xid
        if self.length == 1:
            self.first_id = xid

    def live(self) -> list[tuple[int, list[bytes]]]:
        return [(e[0], e[1]) for n in self.nodes for e in n.entries if not e[2] & 1]

    def _first_live(self) -> int:
        live = self.live()
        return live[0][0] if live else 0

    def delete(self, xid: int) -> bool:
        for i, n in enumerate(self.nodes):
            for e in n.entries:
                if e[0] == xid and not e[2] & 1:
                    if n.count == 1:
                        del self.nodes[i]
                    else:
                        e[2] |= 1
                        n.count -= 1
                        n.deleted += 1
                    self.length -= 1
                    self.max_deleted = max(self.max_deleted, xid)
                    self.first_id = self._first_live() if self.length else 0
                    return True
        return False

    def trim(self, maxlen: bool, thr: int, approx: bool, limit: int) -> int:
        deleted = 0
        while self.nodes:
            if maxlen and self.length <= thr:
                break
            n = self.nodes[0]
            entries = n.count
            if limit and deleted + entries > limit:
                break
            if maxlen:
                remove = self.length - entries >= thr
            else:
                remove = n.entries[-1][0] < thr
            if remove:
                self.nodes.pop(0)
                self.length -= entries
                deleted += entries
                continue
            if approx:
                break
            d = 0
            for e in n.entries:
                if (self.length <= thr) if maxlen else (e[0] >= thr):
                    break
                if not e[2] & 1:
                    e[2] |= 1
                    d += 1
                    self.length -= 1
            n.count -= d
            n.deleted += d
            deleted += d
            break
        if self.length == 0:
            self.first_id = 0
        elif deleted:
            self.first_id = self._first_live()
        return deleted


# --- element sizes ------------------------------------------------------------------------------
def _boundary_strings() -> list[bytes]:
    out = [b"", b"0", b"-0", b"00", b"01", b"+1", b" 1", b"1 ", b"-", b"--1", b"1-", b"1a", b"\x001"]
    for edge in (127, 4095, 4096, 32767, 32768, 8388607, 8388608, 2 ** 31 - 1, 2 ** 31,
                 2 ** 63 - 1, 2 ** 63, 10 ** 19, 10 ** 20):
        for v in (edge - 1, edge, edge + 1, -edge - 1, -edge, -edge + 1):
            out.append(b"%d" % v)
    for n in (20, 21, 62, 63, 64, 65, 124, 125, 126, 127, 128, 4094, 4095, 4096, 4097, 16379,
              16380, 16381, 16382, 16383):
        out += [b"x" * n, b"1" * n]
    return out


def test_element_sizes_match_listpack_encoding() -> None:
    from node.listpack import _esz, _isz, _sum_esz

    strs = _boundary_strings()
    for b in strs:
        assert _esz(b) == lp_elem_size(b), b
    assert _sum_esz(strs) == sum(lp_elem_size(b) for b in strs)
    for v in range(-70000, 70000, 7):
        assert _isz(v) == lp_elem_size(v)
    for e in (8388607, 8388608, 2 ** 31 - 1, 2 ** 31, 2 ** 63 - 1):
        for v in (e, -e, -e - 1):
            assert _isz(v) == lp_elem_size(v), v


# --- hypothesis: Stream against RefStream -----------------------------------------------------
VALUES = st.one_of(
    st.sampled_from(_boundary_strings()[:90]),
    st.binary(max_size=12),
    st.integers(-(10 ** 15), 10 ** 15).map(lambda i: b"%d" % i),
    st.sampled_from([63, 64, 125, 126, 127, 4094, 4095, 4096, 16383]).map(lambda n: b"v" * n),
)
FIELD_NAMES = st.sampled_from([b"a", b"b", b"temp", b"1", b"-7", b"x" * 70])

ADD = st.tuples(st.just("add"),
                st.sampled_from(["seq", "seq", "ms", "bigms", "bigseq", "wrapseq"]),
                st.one_of(st.just(None),  # None = the master shape
                          st.lists(st.tuples(FIELD_NAMES, VALUES), min_size=1, max_size=4)),
                st.lists(VALUES, min_size=3, max_size=3))
DEL = st.tuples(st.just("del"), st.integers(0, 10 ** 6))
TRIM = st.tuples(st.just("trim"), st.booleans(), st.booleans(), st.integers(0, 10 ** 6),
                 st.sampled_from([0, 0, 1, 3, 20]))
OPS = st.lists(st.one_of(ADD, ADD, ADD, DEL, TRIM), max_size=120)


def check_same(s: Stream, ref: RefStream) -> None:
    assert s.length == ref.length
    assert s.num_blocks() == len(ref.nodes)
    assert s.first_id == ref.first_id
    assert s.max_deleted_entry_id == ref.max_deleted
    assert s.last_id == ref.last_id
    live = ref.live()
    assert list(s.range(0, MAX_ID)) == live
    assert list(s.range(0, MAX_ID, rev=True)) == live[::-1]
    for blk, rn in zip(s._nodes, ref.nodes, strict=True):
        assert blk.first == rn.master_id
        assert blk.lp_bytes == rn.lp_bytes()
        assert (blk.live, blk.ndel) == (rn.count, rn.deleted)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=st.tuples(st.sampled_from([0, 1, 2, 3, 5, 100]),
                     st.sampled_from([0, 1, 40, 100, 300, 4096])),
       ops=OPS)
def test_matches_reference_model(cfg: tuple[int, int], ops: list) -> None:
    max_entries, max_bytes = cfg
    s = Stream()
    ref = RefStream()
    ms, seq = 1, 0
    ids: list[int] = []
    for op in ops:
        if op[0] == "add":
            _, gap, shape, vals = op
            if gap == "seq":
                seq += 1
            elif gap == "ms":
                ms += 1
                seq = 0
            elif gap == "bigms":
                ms += 1 << 33
                seq = 3
            elif gap == "bigseq":
                seq += 1 << 40
            else:
                ms += 1
                seq = SEQ_MAX - 1
            if seq > SEQ_MAX:
                ms += 1
                seq = 0
            if ms > SEQ_MAX:
                break
            if shape is None:
                fields = [b"a", vals[0], b"b", vals[1], b"temp", vals[2]]
            else:
                fields = [x for pair in shape for x in pair]
            x = sid(ms, seq)
            s.append(x, fields, max_entries, max_bytes)
            ref.append(x, fields, max_entries, max_bytes)
            ids.append(x)
        elif op[0] == "del":
            if ids:
                x = ids[op[1] % len(ids)]
                assert s.delete(x) == ref.delete(x)
        else:
            _, maxlen, approx, t, limit = op
            if maxlen:
                thr = t % (ref.length + 3)
            else:
                thr = ids[t % len(ids)] + (t % 3) - 1 if ids else 0
                thr = max(thr, 0)
            got = s.trim("maxlen" if maxlen else "minid", thr, approx, limit if approx else 0)
            assert got == ref.trim(maxlen, thr, approx, limit if approx else 0)
        check_same(s, ref)
    for x in ids[::7]:
        assert s.get(x) == next((f for i, f in ref.live() if i == x), None)
    for blk in s._nodes:
        if type(blk) is Block:
            assert Block.pack(Tail.unpack(blk)).state() == blk.state()
    # every node survives a persistence round trip unchanged
    s2 = Stream.from_state(s.dump_state())
    assert list(s2.range(0, MAX_ID)) == ref.live()
    assert s2.num_blocks() == s.num_blocks()
    assert [b.lp_bytes for b in s2._nodes] == [b.lp_bytes for b in s._nodes]


# --- direct unit tests ------------------------------------------------------------------------
def test_ids_and_errors() -> None:
    s = Stream()
    assert s.next_auto_id(1000) == sid(1000)
    s.append(sid(1000, 5), [b"f", b"v"], 100, 4096)
    assert s.next_auto_id(999) == sid(1000, 6)  # clock went back: keep the last ms
    assert s.next_auto_id(1001) == sid(1001)
    assert s.next_seq_id(1000) == sid(1000, 6)
    assert s.next_seq_id(2000) == sid(2000, 0)
    assert s.next_seq_id(5) == sid(5)  # too small, but append is what refuses it
    with pytest.raises(IDTooSmall):
        s.append(sid(5), [b"f", b"v"], 100, 4096)
    with pytest.raises(IDTooSmall):
        s.append(sid(1000, 5), [b"f", b"v"], 100, 4096)
    s.append(sid(1000, SEQ_MAX), [b"f", b"v"], 100, 4096)
    with pytest.raises(IDTooSmall):
        s.next_seq_id(1000)
    assert s.next_auto_id(0) == sid(1001, 0)  # the sequence carries into the next ms
    s.append(MAX_ID, [b"f", b"v"], 100, 4096)
    assert s.last_id == MAX_ID and s.length == 3 and s.entries_added == 3
    with pytest.raises(IDTooSmall):
        s.append(MAX_ID, [b"f", b"v"], 100, 4096)


def test_elements_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    import node.stream as mod

    monkeypatch.setattr(mod, "LP_MAX_SIZE", 100)
    s = Stream()
    with pytest.raises(ElementsTooLarge):
        s.append(sid(1), [b"f", b"v" * 100], 100, 4096)
    assert s.length == 0 and s.num_blocks() == 0 and s.last_id == 0


@pytest.mark.parametrize(("ms_step", "seq", "codes"), [
    (1, 0, "HH"), (70000, 0, "IH"), (1, 70000, "HI"), (1 << 33, 0, "QH"), (1, 1 << 40, "HQ")])
def test_packed_id_layouts(ms_step: int, seq: int, codes: str) -> None:
    s = Stream()
    ids = [sid(5 + i * ms_step, seq + i) for i in range(10)]
    for x in ids:
        s.append(x, [b"f", b"v"], 10, 0)
    s.append(sid(1 << 62), [b"f", b"v"], 10, 0)  # seals the first node
    blk = s._nodes[0]
    assert type(blk) is Block and blk.mtc + blk.stc == codes
    assert blk.sids() == ids
    for x in ids:
        assert blk.find(x) >= 0 and s.get(x) == [b"f", b"v"]
        assert blk.find(x + 1) == -1 or x + 1 in ids
        assert list(s.range(x, x)) == [(x, [b"f", b"v"])]
        assert [i for i, _ in s.range(x + 1, MAX_ID, 1)][0] > x
    assert s.get(sid(4)) is None and s.get(ids[-1] + 1) is None
    # bounds whose sequence does not fit the node's key width
    assert [i for i, _ in s.range(sid(5, SEQ_MAX), MAX_ID, 1)] == [ids[1]]
    assert [i for i, _ in s.range(0, sid(5, SEQ_MAX))] == ids[:1]


def test_sealed_node_layouts() -> None:
    s = Stream()
    s.append(sid(1), [b"a", b"x" * 10, b"b", b"y" * 10], 4, 0)
    s.append(sid(2), [b"a", b"1" * 10, b"b", b"z" * 10], 4, 0)
    s.append(sid(3), [b"a", b"q", b"b", b""], 4, 0)  # uneven lengths
    s.append(sid(4), [b"c", b"other"], 4, 0)  # not the master fields
    s.append(sid(5), [b"a", b"p" * 10, b"b", b"p" * 10], 4, 0)  # next node
    s.append(sid(6), [b"a", b"p" * 10, b"b", b"p" * 10], 4, 0)
    s.append(sid(9), [b"a", b"p" * 10, b"b", b"p" * 10], 4, 0)
    s.append(sid(10), [b"a", b"p" * 10, b"b", b"p" * 10], 4, 0)
    s.append(sid(11), [b"a", b"1", b"b", b"2"], 4, 0)
    b0, b1 = s._nodes[0], s._nodes[1]
    assert type(b0) is Block and type(b1) is Block and type(s._nodes[2]) is Tail
    assert b0.lens is not None and b0.nfs is not None and b0.flags is not None
    assert b1.lens is None and b1.elen == 10 and b1.flags is None and b1.nfs is None
    assert b1.master is b0.master  # equal master fields are stored once
    assert [i >> 64 for i, _ in s.range(0, MAX_ID)] == [1, 2, 3, 4, 5, 6, 9, 10, 11]
    assert s.get(sid(4)) == [b"c", b"other"]
    assert s.get(sid(3)) == [b"a", b"q", b"b", b""]
    assert list(s.range(sid(2), sid(4), rev=True)) == [
        (sid(4), [b"c", b"other"]), (sid(3), [b"a", b"q", b"b", b""]),
        (sid(2), [b"a", b"1" * 10, b"b", b"z" * 10])]
    assert s.delete(sid(6)) and b1.flags is not None and b1.ndel == 1
    assert [i >> 64 for i, _ in s.range(sid(5), sid(10))] == [5, 9, 10]
    assert [i >> 64 for i, _ in s.range(sid(5), sid(10), 2, rev=True)] == [10, 9]
    for blk in (b0, b1):  # reopening and resealing a node changes nothing
        assert Block.pack(Tail.unpack(blk)).state() == blk.state()


def test_reopen_sealed_node_when_last_node_goes() -> None:
    """XDEL of every entry of the last node makes the previous node the tail again."""
    s = Stream()
    s.append(sid(1), [b"f", b"a" * 10], 0, 100)
    s.append(sid(2), [b"f", b"b" * 10], 0, 100)
    s.append(sid(3), [b"f", b"c" * 90], 0, 100)  # does not fit: new node
    assert s.num_blocks() == 2 and type(s._nodes[0]) is Block
    assert s.delete(sid(3))
    assert s.num_blocks() == 1 and s._tail is None
    s.append(sid(4), [b"f", b"d" * 10], 0, 100)  # fits in the first node again
    assert s.num_blocks() == 1 and type(s._nodes[0]) is Tail
    assert [f[1][:1] for _, f in s.range(0, MAX_ID)] == [b"a", b"b", b"d"]


def test_exact_minid_trim_can_leave_an_empty_node() -> None:
    """Redis keeps a node whose live entries were all trimmed if its last entry is a tombstone."""
    s = Stream()
    for i in range(1, 5):
        s.append(sid(i), [b"f", b"v"], 100, 0)
    assert s.delete(sid(4))
    assert s.trim("minid", sid(4), False, 0) == 3
    assert s.length == 0 and s.num_blocks() == 1 and s.first_id == 0
    assert list(s.range(0, MAX_ID)) == [] and s.first_entry() is None
    assert s.edge_id(True, False) == sid(1) and s.edge_id(True, True) == MAX_ID
    s.append(sid(5), [b"f", b"v"], 100, 0)
    assert s.num_blocks() == 1 and s.first_id == sid(5)
    assert s.trim("maxlen", 0, True, 0) == 1 and s.num_blocks() == 0


def test_group_lag_helpers() -> None:
    """The 7.2+ lag helpers of node/groups.py on the stream states that matter to them."""
    from node.groups import estimate_distance, range_has_tombstones

    s = Stream()
    assert estimate_distance(s, sid(5)) == 0
    for i in range(1, 6):
        s.append(sid(i), [b"f", b"v"], 100, 0)
    assert not range_has_tombstones(s, None, None)
    assert estimate_distance(s, sid(5)) == 5
    assert estimate_distance(s, sid(1)) == 1
    assert estimate_distance(s, sid(0, 1)) == 0
    assert estimate_distance(s, sid(3)) is None
    assert estimate_distance(s, sid(6)) is None
    s.delete(sid(3))
    assert range_has_tombstones(s, sid(2), None) and not range_has_tombstones(s, sid(4), None)
    assert estimate_distance(s, sid(1)) is None
    s.delete(sid(1))
    assert s.first_id == sid(2) and s.max_deleted_entry_id == sid(3)
    assert s.last_valid_id() == sid(5)
    assert s.first_entry() == (sid(2), [b"f", b"v"])
    assert s.last_entry() == (sid(5), [b"f", b"v"])


def test_blocks_and_state_round_trip() -> None:
    s = Stream()
    rng = random.Random(3)
    for i in range(1, 500):
        f = [b"k", b"%d" % rng.randint(-10 ** 6, 10 ** 6), b"s", rng.randbytes(rng.randint(0, 9))]
        s.append(sid(i * 3, i % 7), f if i % 11 else [b"z", b"w"], 100, 4096)
    for i in range(1, 500, 13):
        s.delete(sid(i * 3, i % 7))
    blocks = list(s.blocks())
    assert all(type(b) is Block for b in blocks) and len(blocks) == s.num_blocks()
    assert type(s._nodes[-1]) is Tail  # packing for a snapshot leaves the tail open
    st_ = s.dump_state()
    s2 = Stream.from_state(st_)
    assert list(s2.range(0, MAX_ID)) == list(s.range(0, MAX_ID))
    assert (s2.length, s2.last_id, s2.first_id, s2.max_deleted_entry_id, s2.entries_added) == (
        s.length, s.last_id, s.first_id, s.max_deleted_entry_id, s.entries_added)
    s2.append(sid(10 ** 6), [b"k", b"v"], 100, 4096)  # the last node reopens after a restore
    c = s.copy()
    assert list(c.range(0, MAX_ID)) == list(s.range(0, MAX_ID))


def test_memory_per_entry_and_no_per_entry_objects() -> None:
    """100k entries of 5 fields x 10-byte values: well under Redis's ~70 bytes/entry x 1.5."""
    rng = random.Random(1)
    names = [b"field%d" % i for i in range(1, 6)]
    pool = [rng.randbytes(10) for _ in range(1000)]
    gc.collect()
    before = len(gc.get_objects())
    s = Stream()
    n = 100_000
    for i in range(n):
        f = []
        for name in names:
            f += [name, pool[(i * 7 + len(f)) % 1000]]
        s.append(sid(1_700_000_000_000 + i // 30, i % 30), f, 100, 4096)
    gc.collect()
    # GC-tracked objects grow with nodes, not with entries
    assert len(gc.get_objects()) - before < s.num_blocks() + 300
    heap = sys.getsizeof(s._nodes) + sys.getsizeof(s._firsts)
    for blk in s._nodes[:-1]:
        assert type(blk) is Block
        heap += sys.getsizeof(blk) + sys.getsizeof(blk.first)
        heap += sum(sys.getsizeof(getattr(blk, a))
                    for a in ("msd", "seq", "blob", "lens", "flags", "nfs")
                    if getattr(blk, a) is not None)
    per_entry = heap / (n - s._nodes[-1].n)
    assert per_entry < 65, per_entry  # redis-server: ~70 bytes/entry (used_memory)
    assert abs(s.memory_usage() / n - per_entry) < 10


# --- node boundaries against redis-server ------------------------------------------------------
def _oracle_value(rng: random.Random) -> bytes:
    c = rng.random()
    if c < 0.3:
        return b"%d" % rng.randint(-5000, 5000)
    if c < 0.4:
        return b"%d" % rng.randint(-(2 ** 40), 2 ** 40)
    if c < 0.5:
        return b"0%d" % rng.randint(0, 99)
    if c < 0.52:
        return b"w" * rng.choice([63, 64, 200])
    return rng.randbytes(rng.randint(0, 12))


@pytest.mark.parametrize(("max_entries", "max_bytes"), [
    (100, 4096), (0, 4096), (100, 1000), (50, 0), (7, 300), (3, 1)])
def test_node_boundaries_match_redis(oracle_client, max_entries: int, max_bytes: int) -> None:
    """radix-tree-keys and `~` trims agree with redis-server for the same entries."""
    r = oracle_client
    old = r.config_get("stream-node-max-*")
    r.config_set("stream-node-max-entries", max_entries)
    r.config_set("stream-node-max-bytes", max_bytes)
    try:
        rng = random.Random(max_entries * 7919 + max_bytes)
        s = Stream()
        ms, seq = 1_700_000_000_000, 0
        p = r.pipeline(transaction=False)
        for i in range(1500):
            if rng.random() < 0.3:
                ms += rng.randint(1, 300)
                seq = 0
            else:
                seq += 1
            x = sid(ms, seq)
            if rng.random() < 0.9:
                f = [b"temp", _oracle_value(rng), b"hum", _oracle_value(rng), b"id",
                     _oracle_value(rng)]
            else:
                f = [b"other", _oracle_value(rng)]
            p.execute_command("XADD", "k", fid(x), *f)
            s.append(x, f, max_entries, max_bytes)
            if rng.random() < 0.05:
                d = sid(ms, rng.randint(0, seq))
                p.execute_command("XDEL", "k", fid(d))
                s.delete(d)
            if i % 100 == 99:
                p.xinfo_stream("k")
                info = p.execute()[-1]
                assert (info["radix-tree-keys"], info["length"]) == (s.num_blocks(), s.length), i
        limit = 100 * max_entries if max_entries else 10000
        for n in (1400, 1000, 999, 500, 10):
            assert r.xtrim("k", maxlen=n, approximate=True) == s.trim("maxlen", n, True, limit)
            assert r.xinfo_stream("k")["radix-tree-keys"] == s.num_blocks()
        first = s.first_id
        for step in (1, 30, 200):
            m = first + (step << 64)
            assert r.xtrim("k", minid=fid(m), approximate=True) == s.trim("minid", m, True, limit)
        assert r.xlen("k") == s.length
    finally:
        r.config_set("stream-node-max-entries", old["stream-node-max-entries"])
        r.config_set("stream-node-max-bytes", old["stream-node-max-bytes"])
