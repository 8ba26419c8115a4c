"""XINFO STREAM / GROUPS / CONSUMERS on partitioned streams at the router: each partition's
reply folded field by field into one stream's (router/pstreams.py has the record and the
helpers; which fields are exact is in docs/partitioned-streams.md)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from node.resp import ZERO, bulk_value, error_code, int_value, integer, map_header, reply_elements
from node.streamid import parse_id
from router import pstreams
from router.pstreams import (
    PStream,
    _all,
    _array,
    _conn,
    _entry_id,
    _existing,
    _refuse,
    _send,
    _with_key,
)

if TYPE_CHECKING:
    from router.client import Cell, RouterClient
    from router.proxy import Router

__all__ = ["HANDLERS"]

# --- XINFO ---------------------------------------------------------------------------------------
# How each field of one partition's XINFO reply folds into the logical stream's; see
# docs/partitioned-streams.md for which are exact. A field not named here (a later Redis's)
# is summed when it is an integer and otherwise taken from the first partition.
_STREAM_FIELDS = {
    b"length": "sum", b"radix-tree-keys": "sum", b"radix-tree-nodes": "sum",
    b"entries-added": "sum", b"pids-tracked": "sum", b"iids-tracked": "sum",
    b"iids-added": "sum", b"iids-duplicates": "sum", b"groups": "max",
    b"last-generated-id": "max_id", b"max-deleted-entry-id": "max_id",
    b"recorded-first-entry-id": "min_id", b"first-entry": "min_entry",
    b"last-entry": "max_entry", b"idmp-duration": "first", b"idmp-maxsize": "first",
}
_GROUP_FIELDS = {
    b"name": "first", b"consumers": "max", b"pending": "sum", b"last-delivered-id": "max_id",
    b"entries-read": "sum_or_nil", b"lag": "sum_or_nil",
}
_CONSUMER_FIELDS = {b"name": "first", b"pending": "sum", b"idle": "min",
                    b"inactive": "min_seen"}


def _id_of(v: bytes) -> int:
    return parse_id(bulk_value(v)) or 0


def _fold_field(how: str, vals: list[bytes]) -> bytes:
    ints = all(v[:1] == b":" for v in vals)
    if how == "sum" or (how == "" and ints):
        return integer(sum(int_value(v) for v in vals)) if ints else vals[0]
    if how == "sum_or_nil":
        return integer(sum(int_value(v) for v in vals)) if ints else \
            next(v for v in vals if v[:1] != b":")
    if how in ("max", "min"):
        f = max if how == "max" else min
        return integer(f(int_value(v) for v in vals)) if ints else vals[0]
    if how == "min_seen":  # -1: never active
        seen = [int_value(v) for v in vals if v[:1] == b":" and int_value(v) >= 0]
        return integer(min(seen)) if seen else vals[0]
    if how in ("max_id", "min_id"):
        return (max if how == "max_id" else min)(vals, key=_id_of)
    if how in ("min_entry", "max_entry"):
        real = [v for v in vals if v[:1] in (b"*", b"~") and not v.startswith(b"*-1")]
        if not real:
            return vals[0]
        return (min if how == "min_entry" else max)(real, key=_entry_id)
    return vals[0]


def _fold_maps(maps: list[tuple[bytes, list[bytes]]], rules: dict[bytes, str]) -> bytes:
    """Maps (RESP3) or flat arrays (RESP2) of the same fields, folded field by field."""
    kind = maps[0][0]
    first = maps[0][1]
    names = [bulk_value(first[j]) for j in range(0, len(first), 2)]
    by_name = [{bulk_value(els[j]): els[j + 1] for j in range(0, len(els), 2)}
               for _, els in maps]
    out = []
    for j, n in enumerate(names):
        vals = [m[n] for m in by_name if n in m]
        out.append(first[2 * j] + _fold_field(rules.get(n, ""), vals))
    return map_header(len(out), 3 if kind == b"%" else 2) + b"".join(out)


def xinfo_stream(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                 cell: Cell) -> None:
    if len(argv) > 3:
        return _refuse(c, cell, b"XINFO STREAM ... FULL", ps)

    def merged(replies: list[bytes]) -> bytes:
        ok = _existing(ps, replies)
        if isinstance(ok, bytes):
            return ok
        maps = [reply_elements(r) for r in ok]
        nonempty = [m for m in maps if any(
            bulk_value(m[1][j]) == b"length" and m[1][j + 1] != ZERO
            for j in range(0, len(m[1]), 2))]
        out = _fold_maps(maps, _STREAM_FIELDS)
        if nonempty and len(nonempty) < len(maps):  # the first ID of an empty one is 0-0
            rec = _fold_maps(nonempty, _STREAM_FIELDS)
            out = _replace_field(out, rec, b"recorded-first-entry-id")
        return out
    _all(router, c, argv, ps, cell, merged, key_at=2)
    return None


def _replace_field(reply: bytes, other: bytes, name: bytes) -> bytes:
    kind, els = reply_elements(reply)
    oels = reply_elements(other)[1]
    for j in range(0, len(els), 2):
        if bulk_value(els[j]) == name:
            els[j + 1] = next(oels[k + 1] for k in range(0, len(oels), 2)
                              if bulk_value(oels[k]) == name)
    return map_header(len(els) // 2, 3 if kind == b"%" else 2) + b"".join(els)


def _unread_as_zero(ms: list[tuple[bytes, list[bytes]]]) -> list[tuple[bytes, list[bytes]]]:
    """A group's rows over the partitions, where a partition that has delivered nothing yet
    (last-delivered-id 0-0, entries-read nil) counts as 0 entries read once another partition
    has a count. One stream's entries-read is nil only until its first delivery; the logical
    stream's would otherwise stay nil for as long as one partition (one with no entries, say)
    has delivered nothing."""
    def field(els: list[bytes], name: bytes) -> int | None:
        return next((j + 1 for j in range(0, len(els), 2) if bulk_value(els[j]) == name), None)

    counted = False
    for _kind, els in ms:
        j = field(els, b"entries-read")
        counted = counted or (j is not None and els[j][:1] == b":")
    if not counted:
        return ms
    out = []
    for kind, els in ms:
        j, last = field(els, b"entries-read"), field(els, b"last-delivered-id")
        if j is not None and last is not None and els[j][:1] != b":" and \
                bulk_value(els[last]) == b"0-0":
            els = [*els[:j], integer(0), *els[j + 1:]]
        out.append((kind, els))
    return out


def _xinfo_list(rules: dict[bytes, str],
                prepare: Callable[[list[tuple[bytes, list[bytes]]]],
                                  list[tuple[bytes, list[bytes]]]] | None = None,
                then: Callable[[bytes], None] | None = None) -> Callable[..., None]:
    """XINFO GROUPS / CONSUMERS: one row per name over the partitions, folded field by field,
    in name order (as one stream lists them: its groups and consumers are kept sorted by
    name; a consumer may exist on some partitions only); `prepare` sees one name's rows
    first; `then` gets the reply instead of the client."""
    def handler(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                cell: Cell) -> None:
        def merged(replies: list[bytes]) -> bytes:
            ok = _existing(ps, replies)  # (a partition without the key or group: none)
            if isinstance(ok, bytes):
                return ok
            rows: dict[bytes, list[tuple[bytes, list[bytes]]]] = {}
            for r in ok:
                for row in reply_elements(r)[1]:
                    kind, els = reply_elements(row)
                    name = next(bulk_value(els[j + 1]) for j in range(0, len(els), 2)
                                if bulk_value(els[j]) == b"name")
                    rows.setdefault(name, []).append((kind, els))
            return _array([_fold_maps(prepare(ms) if prepare else ms, rules)
                           for _, ms in sorted(rows.items())])
        if then is None:
            return _all(router, c, argv, ps, cell, merged, key_at=2)
        reqs = [(s, _with_key(argv, 2, k)) for k, s in zip(ps.keys, ps.slots, strict=True)]
        return _send(router, c, reqs, False, merged, then)
    return handler


def xinfo_groups(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                 cell: Cell) -> None:
    """XINFO GROUPS, folded (`_xinfo_list`); then each group's consumers are counted once
    over the partitions (XINFO CONSUMERS on each): a consumer that read only some
    partitions (a backlog's reads stick to one) is on those only, so no partition's count
    is the group's."""
    conn = _conn(c)

    def folded(r: bytes) -> None:
        if error_code(r) is not None or r == _array([]):
            return conn.fill(cell, r)
        rows = reply_elements(r)[1]
        names = [_field(row, b"name") for row in rows]
        reqs = [(s, [b"XINFO", b"CONSUMERS", k, bulk_value(n)])
                for n in names for k, s in zip(ps.keys, ps.slots, strict=True)]

        def counted(replies: list[bytes]) -> bytes:
            out = []
            for i, row in enumerate(rows):
                who = {_field(e, b"name") for rep in replies[i * ps.n:(i + 1) * ps.n]
                       if error_code(rep) is None for e in reply_elements(rep)[1]}
                out.append(_set_field(row, b"consumers", integer(len(who))))
            return _array(out)
        return _send(router, c, reqs, False, counted, partial(conn.fill, cell))
    _xinfo_list(_GROUP_FIELDS, _unread_as_zero, folded)(router, c, argv, ps, cell)


def _field(reply: bytes, name: bytes) -> bytes:
    """The value of field `name` in a map (or RESP2 flat array) reply."""
    els = reply_elements(reply)[1]
    return next(els[j + 1] for j in range(0, len(els), 2) if bulk_value(els[j]) == name)


def _set_field(reply: bytes, name: bytes, value: bytes) -> bytes:
    kind, els = reply_elements(reply)
    els = [value if j % 2 and bulk_value(els[j - 1]) == name else e for j, e in enumerate(els)]
    return map_header(len(els) // 2, 3 if kind == b"%" else 2) + b"".join(els)


HANDLERS: dict[bytes, Callable[..., None]] = {
    b"xinfo|stream": xinfo_stream,
    b"xinfo|groups": xinfo_groups,
    b"xinfo|consumers": _xinfo_list(_CONSUMER_FIELDS),
}
"""The XINFO handlers, by command fullname."""
pstreams.HANDLERS.update(HANDLERS)  # (whichever of the two modules is imported first)
