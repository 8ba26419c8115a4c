"""A 7.2+ reference (valkey 8.1) seen as Redis 8.10 for the two rules Redis added since.

Source: redis/redis#14257 (ENTRIESREAD above entries-added gave a negative lag; fixed) and
apache/kvrocks#3581 (quotes t_stream.c and Redis 8.10's replies):
- XGROUP CREATE/SETID store an ENTRIESREAD above the stream's entries-added as entries-added:
  the reference is sent the clamped value, so both servers hold the same counter after it;
- XINFO reports `lag` = the stream's length for a group whose last-delivered ID is before the
  first entry, and 0 for an emptied stream: the reference's lag of such a group is replaced.
Nothing else is touched. Inside MULTI nothing is adjusted (the extra XINFO would be queued).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.support.diff import _rebuild, map_pairs
from tests.support.rawresp import Reply


def _fields(reply: Reply) -> dict[bytes, Reply]:
    return {k[1]: v for k, v in map_pairs(reply) or []}


def _id(text: bytes) -> tuple[int, int]:
    ms, _, seq = text.partition(b"-")
    return int(ms), int(seq or 0)


class Redis810View:
    """Wraps the reference's `call`: `argv` before sending, the raw reply after."""

    def __init__(self, call: Callable[..., Reply]) -> None:
        self.call = call
        self.in_multi = False

    def _stream(self, key: bytes) -> dict[bytes, Reply] | None:
        r = self.call(b"XINFO", b"STREAM", key)
        return None if r[0] == "-" else _fields(r)

    def argv(self, argv: list[bytes]) -> list[bytes]:
        name = argv[0].upper() if argv else b""
        if name == b"MULTI":
            self.in_multi = True
        elif name in (b"EXEC", b"DISCARD"):
            self.in_multi = False
        if (self.in_multi or name != b"XGROUP" or len(argv) < 7
                or argv[1].upper() not in (b"CREATE", b"SETID")):
            return argv
        j = max((i for i in range(5, len(argv) - 1) if argv[i].upper() == b"ENTRIESREAD"),
                default=None)
        if j is None or not argv[j + 1].isdigit() or argv[j + 1] != b"%d" % int(argv[j + 1]):
            return argv
        info = self._stream(argv[2])
        added = 0 if info is None else info[b"entries-added"][1]
        if int(argv[j + 1]) <= added:
            return argv
        return [*argv[:j + 1], b"%d" % added, *argv[j + 2:]]

    def reply(self, argv: list[bytes], reply: Reply) -> Reply:
        if (self.in_multi or len(argv) < 3 or argv[0].upper() != b"XINFO"
                or argv[1].upper() not in (b"GROUPS", b"STREAM") or reply[0] == "-"):
            return reply
        info = self._stream(argv[2])
        if info is None:
            return reply
        length = info[b"length"][1]
        first = info[b"first-entry"]
        first_id = _id(first[1][0][1]) if length and first[1] else None
        return _lag(reply, length, first_id)


def _lag(node: Reply, length: int, first_id: tuple[int, int] | None) -> Reply:
    if not isinstance(node, tuple) or node[0] not in ("*", "%") or node[1] is None:
        return node
    pairs = map_pairs(node)
    if pairs is None:
        return (node[0], [_lag(x, length, first_id) for x in node[1]])
    keys = [k[1] for k, _ in pairs]
    if b"last-delivered-id" in keys and b"lag" in keys:
        last = _id(pairs[keys.index(b"last-delivered-id")][1][1])
        if not length:
            pairs[keys.index(b"lag")] = (pairs[keys.index(b"lag")][0], (":", 0))
        elif first_id is not None and last < first_id:
            pairs[keys.index(b"lag")] = (pairs[keys.index(b"lag")][0], (":", length))
        return _rebuild(node, pairs)
    return _rebuild(node, [(k, _lag(v, length, first_id)) for k, v in pairs])
