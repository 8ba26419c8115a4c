"""Fan-out replies merged into one: pure functions of reply bytes, no router, no I/O.

The response policies are Redis's command tips (node/commands.json, `response_policy:...`),
which cluster clients use to combine the replies of a command sent to several shards:

    agg_sum, agg_min, agg_max       integers, or arrays of integers element by element (WAITAOF)
    agg_logical_and, agg_logical_or 0/1 integers
    all_succeeded                   the first error if any, else the first reply
    one_succeeded                   the first reply that is not an error, else the first error
    (none)                          aggregates concatenated (KEYS); in key order for multi-key

Errors win in every policy but one_succeeded: the first error in request order is the answer.
XREAD/XREADGROUP across shards have merges of their own (stream_items onwards): entries go
back in the order the client named the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from node import errors
from node.resp import (
    EMPTY_ARRAY,
    OK,
    aggregate_header,
    array_header,
    bulk_value,
    encode,
    error_code,
    int_value,
    integer,
    keyed_header,
    keyed_pair,
    null_array,
    reply_elements,
    reply_end,
)

__all__ = [
    "MERGES", "merge", "first_error", "concat", "in_key_order", "stream_items",
    "merge_stream_replies", "earliest_error", "has_group", "ReadCaps", "cap_stream_reply",
]

Replies = Sequence[bytes]


def first_error(replies: Replies) -> bytes | None:
    for r in replies:
        if error_code(r) is not None:
            return r
    return None


def _numbers(replies: Replies, proto: int, fn: Callable[[list[int]], int]) -> bytes:
    err = first_error(replies)
    if err is not None:
        return err
    if not replies:
        return encode(fn([0]), proto)
    if replies[0][:1] == b":":
        return integer(fn([int_value(r) for r in replies]))
    rows = [[int_value(e) for e in reply_elements(r)[1]] for r in replies]
    return encode([fn(list(col)) for col in zip(*rows, strict=True)], proto)


def agg_sum(replies: Replies, proto: int) -> bytes:
    return _numbers(replies, proto, sum)


def agg_min(replies: Replies, proto: int) -> bytes:
    return _numbers(replies, proto, min)


def agg_max(replies: Replies, proto: int) -> bytes:
    return _numbers(replies, proto, max)


def agg_logical_and(replies: Replies, proto: int) -> bytes:
    return _numbers(replies, proto, lambda v: int(all(v)))


def agg_logical_or(replies: Replies, proto: int) -> bytes:
    return _numbers(replies, proto, lambda v: int(any(v)))


def all_succeeded(replies: Replies, proto: int) -> bytes:
    err = first_error(replies)
    if err is not None:
        return err
    return replies[0] if replies else OK


def one_succeeded(replies: Replies, proto: int) -> bytes:
    for r in replies:
        if error_code(r) is None:
            return r
    return replies[0] if replies else OK


def concat(replies: Replies, proto: int) -> bytes:
    """Keyless commands without a policy (KEYS): every shard's elements in one aggregate."""
    err = first_error(replies)
    if err is not None:
        return err
    if not replies:
        return EMPTY_ARRAY
    kind = replies[0][:1]
    els = [e for r in replies for e in reply_elements(r)[1]]
    count = len(els) // 2 if kind == b"%" else len(els)
    return aggregate_header(kind, count) + b"".join(els)


MERGES: dict[str | None, Callable[[Replies, int], bytes]] = {
    "agg_sum": agg_sum,
    "agg_min": agg_min,
    "agg_max": agg_max,
    "agg_logical_and": agg_logical_and,
    "agg_logical_or": agg_logical_or,
    "all_succeeded": all_succeeded,
    "one_succeeded": one_succeeded,
    None: concat,
}
"""Merge function by response policy (None: the command has none)."""


def merge(policy: str | None, replies: Replies, proto: int) -> bytes:
    return MERGES[policy](replies, proto)


def in_key_order(groups: Sequence[Sequence[int]], replies: Replies, nkeys: int) -> bytes:
    """A multi-key command without a response policy (MGET-like): each request's elements
    answer its keys, and the merged array follows the client's key order."""
    err = first_error(replies)
    if err is not None:
        return err
    out: list[bytes] = [b""] * nkeys
    for idx, r in zip(groups, replies, strict=True):
        for i, e in zip(idx, reply_elements(r)[1], strict=True):
            out[i] = e
    return array_header(nkeys) + b"".join(out)


# --- XREAD / XREADGROUP across shards ------------------------------------------------------------
def stream_items(r: bytes) -> list[tuple[bytes, bytes]]:
    """[(key, the bytes that describe it)] from an XREAD reply (RESP2 array of [key, entries],
    or a RESP3 map key -> entries); [] for a null reply."""
    if r[:1] not in (b"*", b"%") or r.startswith(b"*-1"):
        return []
    kind, els = reply_elements(r)
    if kind == b"%":
        return [(bulk_value(els[i]), els[i] + els[i + 1]) for i in range(0, len(els), 2)]
    return [(bulk_value(reply_elements(el)[1][0]), el) for el in els]


def merge_stream_replies(keys: Sequence[bytes], groups: Sequence[Sequence[int]],
                         replies: Replies, proto: int) -> bytes:
    """One XREAD reply from the shards' replies, in request order. A shard answers for its
    keys in their order, leaving out those without entries, so its elements are matched to
    its key positions in sequence (a request never names a key twice)."""
    items: list[tuple[int, bytes]] = []
    for idx, r in zip(groups, replies, strict=True):
        j = 0
        for k, raw in stream_items(r):
            while j < len(idx) and keys[idx[j]] != k:
                j += 1
            if j == len(idx):
                break
            items.append((idx[j], raw))
            j += 1
    if not items:
        return null_array(proto)
    items.sort(key=lambda t: t[0])
    return keyed_header(len(items), proto) + b"".join(raw for _, raw in items)


class ReadCaps:
    """XREAD/XREADGROUP's MAXCOUNT and MAXSIZE (Redis 8.10) over a reply built from several
    shards' parts, counted as one node counts them (node/commands/reads.py `_Budget`): every
    byte of a stream's header, key and entries, not the entry counts nor the outer length.
    `take` cuts one stream's part to what is left; `spent` says that nothing more may come.
    A shard's part is itself capped by the node, so cutting the merged reply in key order
    gives what one node holding every key would answer."""

    __slots__ = ("left", "maxsize", "used", "entries")

    def __init__(self, maxcount: int, maxsize: int) -> None:
        self.left = maxcount  # 0: no MAXCOUNT
        self.maxsize = maxsize  # 0: no MAXSIZE
        self.used = 0
        self.entries = 0

    def spent(self) -> bool:
        """Checked before each stream: MAXCOUNT used up, or MAXSIZE reached after an entry."""
        return (self.left < 0 or (self.maxsize != 0 and self.entries != 0
                                  and self.used >= self.maxsize))

    def take(self, raw: bytes, proto: int) -> bytes | None:
        """One stream's part of a reply ([key, entries] in RESP2, key + entries in RESP3), cut
        to the caps; None when the caps leave nothing of it."""
        if self.spent():
            return None
        if proto == 2:
            key_el, ents = reply_elements(raw)[1]
            head = keyed_pair(proto) + key_el
        else:
            key_el = raw[:reply_end(raw, 0)]
            ents = raw[len(key_el):]
            head = key_el
        out = self.take_entries(len(head), reply_elements(ents)[1])
        return head + array_header(len(out)) + b"".join(out)

    def take_entries(self, head: int, entries: list[bytes]) -> list[bytes]:
        """The first of one stream's `entries` that the caps leave, its header (`head` bytes)
        counted first, and counted as taken."""
        self.used += head
        out: list[bytes] = []
        for e in entries:
            if out and self.maxsize and self.used >= self.maxsize:
                break
            if self.left and len(out) == self.left:
                break
            out.append(e)
            self.used += len(e)
        self.entries += len(out)
        if self.left:
            self.left -= len(out)
            if not self.left:
                self.left = -1  # spent
        return out


def cap_stream_reply(reply: bytes, caps: ReadCaps, proto: int) -> bytes:
    """A merged XREAD reply (in key order) cut to MAXCOUNT / MAXSIZE."""
    if error_code(reply) is not None:
        return reply
    kept = [t for t in (caps.take(raw, proto) for _k, raw in stream_items(reply))
            if t is not None]
    if not kept:
        return null_array(proto)
    return keyed_header(len(kept), proto) + b"".join(kept)


def earliest_error(keys: Sequence[bytes], groups: Sequence[Sequence[int]],
                   replies: Replies) -> bytes | None:
    """The error Redis would give: the one about the earliest key in argument order. A shard
    reports its own first failing key; NOGROUP names it, other errors count from the first key
    of the shard's request."""
    best: tuple[int, bytes] | None = None
    for idx, r in zip(groups, replies, strict=True):
        if error_code(r) is None:
            continue
        pos = idx[0]
        name = errors.nogroup_key(r)
        if name is not None:
            pos = next((i for i in idx if keys[i] == name), pos)
        if best is None or pos < best[0]:
            best = (pos, r)
    return best[1] if best else None


def has_group(xinfo_groups: bytes, group: bytes) -> bool:
    """Whether an XINFO GROUPS reply lists `group`: each group is a map (RESP3) or a flat
    array (RESP2) whose first field is `name`."""
    return any(bulk_value(reply_elements(g)[1][1]) == group
               for g in reply_elements(xinfo_groups)[1])
