"""`xshard stream`: create, list, describe, alter and delete partitioned streams.

A partitioned stream is the etcd record `pstreams/<name>` (base/records.py PStreamRecord)
plus its partition streams, ordinary stream keys named `{TAG}NAME#p/S` on whichever shards
own their slots (docs/partitioned-streams.md). The node derives the ID rule from that name
(node/stream.py), so these commands only choose names, make the partition streams exist, and
publish the record, each change one guarded etcd transaction (base/store.py put_pstream /
delete_pstream):

- `create` picks the hash tags so that partition p's slot lies in the p-th of N equal slot
  ranges, makes each partition an empty stream on its owner (XGROUP CREATE ... MKSTREAM, then
  XGROUP DESTROY: XLEN and XINFO work before the first XADD), then publishes the record.
- `alter --partitions N` adds partitions in the largest gaps between the slots taken, creates
  them with every group of the stream at their start (ID 0, ENTRIESREAD 0) so that a group
  misses nothing written to them, and only then publishes the record; groups made meanwhile
  are created on the new partitions after it.
- `delete` removes the record first (the routers stop resolving the name), then DELs the keys.

Refusals are one line on stderr and exit 1 (control/clusterctl.py run).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import ssl
import sys
from bisect import bisect_left
from dataclasses import dataclass
from itertools import product

from base.records import SLOTS, NodeRecord, PStreamRecord, View, owners
from base.store import BaseStore
from control.clusterctl import CliError, add_tls, conn_from, format_table, node_tls, open_store
from control.clusterctl import parser as cluster_parser
from node.errors import ResponseError  # an error reply, as node/link.py raises it
from node.link import NodeOps, call_all
from node.slots import key_slot
from node.stream import MAX_STRIDE, partition_of_key

DEFAULT_STRIDE = 64
_TAG_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAX_HOPS = 3  # MOVED/ASK redirections followed while a slot moves

USAGE = """usage: xshard stream <action> [options]   (xshard stream <action> --help)

partitioned streams: one logical stream spread over many shards

  create NAME --partitions N [--key-field F] [--max-partitions S]
            make the partitions (empty streams) and publish the stream
  list      the partitioned streams
  describe NAME
            the partition keys, their slots and shards, lengths and groups
  alter NAME --partitions N
            add partitions (never fewer); every group starts at the beginning of the new ones
  delete NAME
            remove the stream and its partition keys"""


# --- names and tags -------------------------------------------------------------------------------
def partition_key(tag: str, name: str, p: int, stride: int) -> str:
    """Partition p of `name`: the stream key whose name gives the node the ID rule."""
    return f"{{{tag}}}{name}#{p}/{stride}"


_TAGS: list[tuple[str, int]] = []


def _tags() -> list[tuple[str, int]]:
    """Every tag of 1-3 characters of [0-9a-z] with its slot, shortest first: 47,988 tags, so
    every range of 16 slots or more holds several."""
    if not _TAGS:
        for n in (1, 2, 3):
            for t in product(_TAG_CHARS, repeat=n):
                tag = "".join(t)
                _TAGS.append((tag, key_slot(b"{" + tag.encode() + b"}")))
    return _TAGS


def _four_char_tag(want: int) -> str | None:
    """A 4-character tag in exactly slot `want` (the rare slot no shorter tag reaches)."""
    for t in product(_TAG_CHARS, repeat=4):
        tag = "".join(t)
        if key_slot(b"{" + tag.encode() + b"}") == want:
            return tag
    return None


def spread_tags(n: int) -> list[str]:
    """Tags for n partitions: partition p's slot lies in the p-th of n equal slot ranges."""
    bounds = [p * SLOTS // n for p in range(n + 1)]
    out: list[str | None] = [None] * n
    left = n
    for tag, slot in _tags():
        p = bisect_left(bounds, slot + 1) - 1
        if out[p] is None:
            out[p] = tag
            left -= 1
            if not left:
                break
    for p in range(n):  # only with ranges narrower than a few slots (n close to 16384)
        if out[p] is None:
            out[p] = _four_char_tag(bounds[p])
    return [t for t in out if t is not None]


def gap_tags(taken: list[int], k: int) -> list[str]:
    """Tags for k more partitions: each in the middle of the largest gap (circular) left
    between the slots `taken`, one after the other."""
    slots = sorted(set(taken))
    out: list[str] = []
    for _ in range(k):
        if not slots:
            want = 0
        else:
            # (free slots after s up to the next taken one, s); one taken slot: all the others
            gaps = [((slots[(i + 1) % len(slots)] - s - 1) % SLOTS, s)
                    for i, s in enumerate(slots)]
            size, start = max(gaps)
            want = (start + 1 + size // 2) % SLOTS
        tag = _closest_tag(want, set(slots))
        out.append(tag)
        slots = sorted(set(slots) | {key_slot(b"{" + tag.encode() + b"}")})
    return out


def _closest_tag(want: int, avoid: set[int]) -> str:
    best: tuple[int, str] | None = None
    for tag, slot in _tags():
        if slot in avoid:
            continue
        d = min((slot - want) % SLOTS, (want - slot) % SLOTS)
        if best is None or d < best[0]:
            best = (d, tag)
            if d == 0:
                break
    assert best is not None
    return best[1]


def check_name(name: str) -> None:
    if not name:
        raise CliError("the stream name must not be empty")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise CliError(f"bad stream name {name!r}: no control characters")
    if partition_of_key(name.encode()) is not None:
        raise CliError(f"bad stream name {name!r}: it is itself a partition key's name")


def check_key_field(field: str | None) -> None:
    if field is None:
        return
    if not field or len(field.encode()) > 1024 or any(ord(c) < 32 or ord(c) == 127
                                                     for c in field):
        raise CliError(f"bad key field {field!r}: 1 to 1024 bytes, no control characters")


# --- talking to the partitions' owners ------------------------------------------------------------
@dataclass
class Owners:
    """Where each key lives, from one view, and how to reach it."""
    view: View
    ops: NodeOps

    def node_of(self, key: str) -> tuple[str, NodeRecord]:
        """(shard id, its primary's record) for `key`; CliError when it has none live."""
        slot = key_slot(key.encode())
        shard = owners(self.view.slots.value if self.view.slots else [])[slot]
        if shard is None:
            raise CliError(f"slot {slot} (of {key}) has no shard in the slot map")
        entry = self.view.shards.get(shard)
        primary = entry.value.primary if entry else None
        if primary is None or not self.view.live(primary):
            raise CliError(f"shard {shard} (slot {slot}, {key}) has no live primary")
        return shard, self.view.nodes[primary].value

    async def call(self, key: str, commands: list[list]) -> list[object]:
        """`commands` about `key`, on its owner in one connection, following MOVED/ASK while
        its slot moves; ResponseError for an error reply."""
        host, port = self.ops.addr(self.node_of(key)[1])
        asking = False
        for _ in range(_MAX_HOPS):
            cmds = ([["ASKING"]] if asking else []) + commands
            try:
                got = await call_all(host, port, cmds, timeout=self.ops.timeout,
                                     password=self.ops.password, ssl=self.ops.tls,
                                     user=self.ops.user)
            except ResponseError as e:
                words = str(e).split()
                if len(words) == 3 and words[0] in ("MOVED", "ASK"):
                    h, _, p = words[2].rpartition(":")
                    host, port, asking = h, int(p), words[0] == "ASK"
                    continue
                raise
            return got[1:] if asking else got
        raise CliError(f"{key}: still redirected after {_MAX_HOPS} hops (a slot is moving; "
                       "try again)")


async def _each(keys: list[str], fn) -> list:  # noqa: ANN001 - an async function of a key
    return list(await asyncio.gather(*(fn(k) for k in keys)))


async def _make_partition(o: Owners, key: str, groups: list[bytes]) -> None:
    """An empty stream at `key` with `groups` at its start (ID 0, ENTRIESREAD 0)."""
    if groups:
        cmds = [["XGROUP", "CREATE", key, g, "0", "MKSTREAM", "ENTRIESREAD", "0"]
                for g in groups]
    else:  # MKSTREAM needs a group: a throw-away one
        tmp = f"xshard-create-{secrets.token_hex(6)}"
        cmds = [["XGROUP", "CREATE", key, tmp, "0", "MKSTREAM"], ["XGROUP", "DESTROY", key, tmp]]
    await o.call(key, cmds)


async def _exists(o: Owners, key: str) -> bytes:
    """TYPE of `key` on its owner (b"none" when absent)."""
    t = (await o.call(key, [["TYPE", key]]))[0]
    return t if isinstance(t, bytes) else b"none"


async def _groups(o: Owners, key: str) -> list[bytes]:
    reply = (await o.call(key, [["XINFO", "GROUPS", key]]))[0]
    out = []
    for g in reply if isinstance(reply, list) else []:
        d = dict(zip(g[::2], g[1::2], strict=False))
        out.append(d[b"name"])
    return out


# --- the commands ---------------------------------------------------------------------------------
class Ctx:
    """An open store and the node options of one invocation."""

    def __init__(self, store: BaseStore, ops: NodeOps, cluster: str) -> None:
        self.store = store
        self.ops = ops
        self.cluster = cluster

    async def view(self) -> View:
        v = await self.store.view()
        if not v.shards:
            raise CliError(f"cluster '{self.cluster}' does not exist in etcd at "
                           f"{self.store.url} (run xshard create)")
        return v

    def record(self, v: View, name: str):  # noqa: ANN201 - Entry[PStreamRecord]
        e = v.pstreams.get(name)
        if e is None:
            raise CliError(f"no partitioned stream named {name!r} (xshard stream list)")
        return e


async def create(ctx: Ctx, name: str, partitions: int, key_field: str | None,
                 stride: int) -> str:
    check_name(name)
    check_key_field(key_field)
    if not 2 <= stride <= MAX_STRIDE:
        raise CliError(f"--max-partitions must be between 2 and {MAX_STRIDE}, not {stride}")
    if not 1 <= partitions <= stride:
        raise CliError(f"--partitions must be between 1 and --max-partitions ({stride}), "
                       f"not {partitions}")
    v = await ctx.view()
    if name in v.pstreams:
        raise CliError(f"a partitioned stream named {name!r} exists already "
                       f"({v.pstreams[name].value.partitions} partitions)")
    o = Owners(v, ctx.ops)
    kind = await _exists(o, name)
    if kind != b"none":
        raise CliError(f"a {kind.decode()} key named {name!r} exists on shard "
                       f"{o.node_of(name)[0]}: a partitioned stream cannot shadow it")
    keys = [partition_key(t, name, p, stride) for p, t in enumerate(spread_tags(partitions))]
    await _refuse_existing(o, keys)
    await _each(keys, lambda k: _make_partition(o, k, []))
    rec = PStreamRecord(partitions, stride, keys, key_field)
    if not await ctx.store.put_pstream(name, rec, 0):
        raise CliError(f"{name!r} was created concurrently; see xshard stream describe")
    kf = f", key field {key_field!r}" if key_field else ""
    return f"created partitioned stream {name!r}: {partitions} partitions, stride {stride}{kf}"


async def _refuse_existing(o: Owners, keys: list[str]) -> None:
    kinds = await _each(keys, lambda k: _exists(o, k))
    there = [k for k, t in zip(keys, kinds, strict=True) if t != b"none"]
    if there:
        raise CliError(f"partition key {there[0]} exists already ({len(there)} of "
                       f"{len(keys)}); DEL what an earlier stream left first")


async def alter(ctx: Ctx, name: str, partitions: int) -> str:
    v = await ctx.view()
    e = ctx.record(v, name)
    rec: PStreamRecord = e.value
    if partitions < rec.partitions:
        raise CliError(f"{name!r} has {rec.partitions} partitions: partitions are only added "
                       f"(delete the stream to start over)")
    if partitions > rec.stride:
        raise CliError(f"{name!r} can have at most {rec.stride} partitions (its stride, "
                       "fixed at creation)")
    if partitions == rec.partitions:
        return f"{name!r} has {partitions} partitions already; nothing to do"
    o = Owners(v, ctx.ops)
    taken = [key_slot(k.encode()) for k in rec.keys]
    tags = gap_tags(taken, partitions - rec.partitions)
    new = [partition_key(t, name, rec.partitions + i, rec.stride) for i, t in enumerate(tags)]
    await _refuse_existing(o, new)
    groups = await _all_groups(o, rec.keys)
    await _each(new, lambda k: _make_partition(o, k, groups))
    grown = PStreamRecord(partitions, rec.stride, rec.keys + new, rec.key_field)
    if not await ctx.store.put_pstream(name, grown, e.mod):
        raise CliError(f"{name!r} changed while it was altered (another alter or delete?): "
                       f"nothing was published; see xshard stream describe (the keys made "
                       f"here, {new[0]} ..., may be the other alter's too)")
    # A group made through a router between the read above and the record reached only the
    # old partitions: make it on the new ones too, at their start.
    late = [g for g in await _all_groups(o, rec.keys) if g not in groups]
    if late:
        await _each(new, lambda k: o.call(k, [["XGROUP", "CREATE", k, g, "0", "ENTRIESREAD",
                                               "0"] for g in late]))
    return (f"{name!r}: {rec.partitions} -> {partitions} partitions"
            + (f"; {len(groups) + len(late)} groups created on the new ones" if groups or late
               else ""))


async def _all_groups(o: Owners, keys: list[str]) -> list[bytes]:
    seen: dict[bytes, None] = {}
    for gs in await _each(keys, lambda k: _groups(o, k)):
        seen.update(dict.fromkeys(gs))
    return list(seen)


async def delete(ctx: Ctx, name: str) -> str:
    v = await ctx.view()
    e = ctx.record(v, name)
    if not await ctx.store.delete_pstream(name, e.mod):
        raise CliError(f"{name!r} changed while it was deleted; try again")
    o = Owners(v, ctx.ops)
    failed = []
    for k, r in zip(e.value.keys, await asyncio.gather(
            *(o.call(k, [["DEL", k]]) for k in e.value.keys), return_exceptions=True),
            strict=True):
        if isinstance(r, BaseException):
            failed.append(f"{k} ({str(r)[:60]})")
    if failed:
        raise CliError(f"{name!r} is deleted, but DEL failed for {len(failed)} partition "
                       f"keys: {'; '.join(failed[:3])}")
    return f"deleted partitioned stream {name!r} and its {len(e.value.keys)} partition keys"


def list_rows(v: View) -> list[list[str]]:
    rows = [["NAME", "PARTITIONS", "STRIDE", "KEY FIELD"]]
    for name in sorted(v.pstreams):
        r = v.pstreams[name].value
        rows.append([name, str(r.partitions), str(r.stride), r.key_field or "-"])
    return rows


async def describe(ctx: Ctx, name: str) -> list[str]:
    v = await ctx.view()
    rec: PStreamRecord = ctx.record(v, name).value
    o = Owners(v, ctx.ops)

    async def one(k: str) -> list[str]:
        slot = str(key_slot(k.encode()))
        try:
            shard = o.node_of(k)[0]
            n, groups = await o.call(k, [["XLEN", k], ["XINFO", "GROUPS", k]])
        except (CliError, ResponseError, OSError, TimeoutError) as e:
            return [k, slot, "?", "?", str(e)[:60]]
        names = [dict(zip(g[::2], g[1::2], strict=False))[b"name"].decode(errors="replace")
                 for g in groups] if isinstance(groups, list) else []
        return [k, slot, shard, str(n), ",".join(names) or "-"]

    kf = f", key field {rec.key_field!r}" if rec.key_field else ""
    head = [f"{name}: {rec.partitions} partitions, stride {rec.stride}{kf}"]
    rows = [["PARTITION", "KEY", "SLOT", "SHARD", "LENGTH", "GROUPS"]]
    for p, row in enumerate(await _each(rec.keys, one)):
        rows.append([str(p), *row])
    return head + [format_table(rows)]


async def partition_lengths(o: Owners, keys: list[str]) -> dict[str, int | None]:
    """XLEN of each key, asking each owner once for all of its keys (an error reply, such as a
    moving slot's MOVED: that owner's keys one by one, following it); None for a key whose
    owner has no live primary or does not answer."""
    out: dict[str, int | None] = {}
    by_node: dict[tuple[str, int], list[str]] = {}
    for k in keys:
        try:
            by_node.setdefault(o.ops.addr(o.node_of(k)[1]), []).append(k)
        except CliError:
            out[k] = None

    async def one(k: str) -> int | None:
        try:
            n = (await o.call(k, [["XLEN", k]]))[0]
        except (CliError, ResponseError, OSError, TimeoutError):
            return None
        return n if isinstance(n, int) else None

    async def node(addr: tuple[str, int], ks: list[str]) -> None:
        try:
            got = await call_all(*addr, [["XLEN", k] for k in ks], timeout=o.ops.timeout,
                                 password=o.ops.password, ssl=o.ops.tls, user=o.ops.user)
        except ResponseError:
            got = await _each(ks, one)
        except (OSError, TimeoutError):
            got = [None] * len(ks)
        out.update(zip(ks, (n if isinstance(n, int) else None for n in got), strict=True))

    await asyncio.gather(*(node(a, ks) for a, ks in by_node.items()))
    return out


async def status_lines(v: View, ops: NodeOps) -> list[str]:
    """`xshard status`'s section (no partitioned streams: nothing): one row per stream with
    its partition count, how many shards own its partitions (from the slot map), its length
    (the sum of its partitions' XLEN, `?` when some owner does not answer) and key field."""
    if not v.pstreams:
        return []
    slot_owner = owners(v.slots.value if v.slots else [])
    lengths = await partition_lengths(Owners(v, ops),
                                      [k for e in v.pstreams.values() for k in e.value.keys])
    rows = [["NAME", "PARTITIONS", "SHARDS", "LENGTH", "KEY FIELD"]]
    for name, e in sorted(v.pstreams.items()):
        rec: PStreamRecord = e.value
        shards = {slot_owner[key_slot(k.encode())] for k in rec.keys} - {None}
        ns = [lengths.get(k) for k in rec.keys]
        rows.append([name, str(rec.partitions), str(len(shards)),
                     "?" if None in ns else str(sum(n for n in ns if n is not None)),
                     rec.key_field or "-"])
    return ["partitioned streams:", format_table(rows)]


# --- argv -----------------------------------------------------------------------------------------
def _parser(action: str, desc: str) -> argparse.ArgumentParser:
    return add_tls(cluster_parser(f"stream {action}", desc, nodes=True))


def action_parser(action: str) -> argparse.ArgumentParser:
    if action == "create":
        p = _parser("create", "Create a partitioned stream: N partition streams spread over "
                    "the slot space, one name for every router.")
        p.add_argument("name")
        p.add_argument("--partitions", type=int, required=True, metavar="N")
        p.add_argument("--key-field", default=None, metavar="F", help="entries with the same "
                       "value of this field go to the same partition (kept in order)")
        p.add_argument("--max-partitions", type=int, default=DEFAULT_STRIDE, metavar="S",
                       help=f"the stride of the IDs and the most partitions the stream may "
                       f"ever have, 2-{MAX_STRIDE} (default: {DEFAULT_STRIDE})")
    elif action == "list":
        p = _parser("list", "List the partitioned streams.")
    elif action == "describe":
        p = _parser("describe", "Show a partitioned stream's keys, slots, shards, lengths "
                    "and groups.")
        p.add_argument("name")
    elif action == "alter":
        p = _parser("alter", "Add partitions; every group of the stream starts at the "
                    "beginning of the new ones.")
        p.add_argument("name")
        p.add_argument("--partitions", type=int, required=True, metavar="N")
    elif action == "delete":
        p = _parser("delete", "Delete a partitioned stream and its partition keys.")
        p.add_argument("name")
    else:
        raise KeyError(action)
    return p


ACTIONS = ("create", "list", "describe", "alter", "delete")


def cmd_stream(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    action = argv[0]
    if action not in ACTIONS:
        print(f"xshard stream: unknown action '{action}'\n{USAGE}", file=sys.stderr)
        return 2
    a = action_parser(action).parse_args(argv[1:])
    out = asyncio.run(_run(action, a, node_tls(a)))
    print("\n".join(out))
    return 0


async def _run(action: str, a: argparse.Namespace, tls: ssl.SSLContext | None) -> list[str]:
    store = await open_store(conn_from(a), a.cluster)
    ctx = Ctx(store, NodeOps(a.node_password, timeout=5.0, tls=tls, user=a.node_user),
              a.cluster)
    try:
        if action == "create":
            return [await create(ctx, a.name, a.partitions, a.key_field, a.max_partitions)]
        if action == "list":
            return [format_table(list_rows(await ctx.view()))]
        if action == "describe":
            return await describe(ctx, a.name)
        if action == "alter":
            return [await alter(ctx, a.name, a.partitions)]
        return [await delete(ctx, a.name)]
    except (ResponseError, OSError, TimeoutError) as e:
        raise CliError(f"a node: {type(e).__name__}: {str(e)[:200]}") from None
    finally:
        await store.close()


COMMANDS = {"stream": cmd_stream}
