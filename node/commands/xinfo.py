"""XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS, XINFO HELP (Redis 7.4).

Every stream also shows Redis 8.6's IDMP fields (node/idmp.py) in XINFO STREAM, short and
FULL, after `recorded-first-entry-id`; the rest is exactly as in 7.4.

Field names and order are Redis 7.4's. Differences from the 7.0 oracle on this machine: 7.2
added the consumer `active-time` (XINFO STREAM FULL) and `inactive` (XINFO CONSUMERS) fields.
Groups and consumers are listed in byte-wise lexicographic order, as Redis walks its rax.
"""

from __future__ import annotations

from typing import Any

from node import errors
from node.client import Client
from node.commands import command
from node.commands.entryreplies import entry_reply
from node.commands.groups import help_reply, subcommand_syntax_error
from node.groups import sorted_groups
from node.resp import Map, Raw, ReplyError, encode
from node.stream import Stream
from node.streamid import MAX_ID, format_id

_XINFO_HELP = [
    b"CONSUMERS <key> <groupname>",
    b"    Show consumers of <groupname>.",
    b"GROUPS <key>",
    b"    Show the stream consumer groups.",
    b"STREAM <key> [FULL [COUNT <count>]",
    b"    Show information about the stream.",
]


def radix_tree_nodes(firsts: list[int]) -> int:
    """`radix-tree-nodes`: the node count of Redis's rax holding these node keys.

    The keys are 16-byte big-endian IDs (ascending ints here). Redis's rax of equal-length
    keys has the shape of a compressed trie (checked against redis-server and valkey after
    random XADD/XDEL/XTRIM): one node per branching prefix, one per leaf, and one compressed
    node on every path that does not branch at once. From the longest common prefixes (in
    bytes) of neighbouring keys that is O(n): a stack of open branch depths finds the branch
    nodes and their parents; a child position is compressed unless it is itself a branch or
    a leaf.
    """
    n = len(firsts)
    if n < 2:
        return n + 1
    lcp = [(128 - (a ^ b).bit_length()) >> 3 for a, b in
           zip(firsts, firsts[1:], strict=False)]
    branches = 0
    direct = 0  # child positions that are branch nodes themselves
    stack: list[int] = []
    for v in lcp:
        while stack and stack[-1] > v:
            e = stack.pop()
            if e == (max(v, stack[-1]) if stack else v) + 1:
                direct += 1
        if not stack or stack[-1] < v:
            stack.append(v)
            branches += 1
    while stack:
        e = stack.pop()
        if stack and e == stack[-1] + 1:
            direct += 1
    # Leaves hanging directly off a branch at the last byte.
    leaves = sum(1 for i in range(n) if max(lcp[i - 1] if i else -1,
                                            lcp[i] if i < n - 1 else -1) == 15)
    compressed = (1 if min(lcp) else 0) + branches + n - 1 - direct - leaves
    return branches + n + compressed


@command(b"xinfo")
def xinfo(c: Client, argv: list[bytes]) -> bytes:
    """XINFO CONSUMERS key group | GROUPS key | STREAM key [FULL [COUNT n]] | HELP"""
    argc = len(argv)
    sub = argv[1].lower()
    if sub == b"help":
        if argc != 2:
            raise subcommand_syntax_error(argv)
        return help_reply(argv, _XINFO_HELP)
    if argc < 3:
        raise subcommand_syntax_error(argv)
    key = argv[2]
    s = c.db.get_stream(key)
    if s is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    if sub == b"consumers" and argc == 4:
        return _consumers(c, s, key, argv[3])
    if sub == b"groups" and argc == 3:
        return _groups(c, s)
    if sub == b"stream":
        return _stream(c, s, argv)
    raise subcommand_syntax_error(argv)


def _consumers(c: Client, s: Stream, key: bytes, groupname: bytes) -> bytes:
    g = s.groups.get(groupname)
    if g is None:
        raise ReplyError(errors.nogroup_for_key(groupname, key))
    now = c.server.now_ms()
    out = []
    for cons in g.sorted_consumers():
        idle = now - cons.seen_time
        if idle < 0:
            idle = 0
        inactive = now - cons.active_time if cons.active_time != -1 else -1
        out.append(Map([(b"name", cons.name), (b"pending", len(cons.pel)), (b"idle", idle),
                        (b"inactive", inactive)]))
    return encode(out, c.proto)


def _groups(c: Client, s: Stream) -> bytes:
    out = []
    for name, g in sorted_groups(s):
        out.append(Map([
            (b"name", name),
            (b"consumers", len(g.consumers)),
            (b"pending", len(g.pel)),
            (b"last-delivered-id", format_id(g.last_id)),
            (b"entries-read", g.entries_read),
            (b"lag", g.lag(s)),
        ]))
    return encode(out, c.proto)


def _idmp_fields(c: Client, s: Stream) -> list[tuple[bytes, Any]]:
    """Redis 8.6's IDMP fields, on every stream (all counters 0 on one that never used IDMP,
    whose limits are the configs'), after `recorded-first-entry-id` in both forms."""
    m = s.idmp
    if m is None:
        config = c.server.config
        return [(b"idmp-duration", config.stream_idmp_duration),
                (b"idmp-maxsize", config.stream_idmp_maxsize), (b"pids-tracked", 0),
                (b"iids-tracked", 0), (b"iids-added", 0), (b"iids-duplicates", 0)]
    return [(b"idmp-duration", m.duration), (b"idmp-maxsize", m.maxsize),
            (b"pids-tracked", len(m.producers)), (b"iids-tracked", m.iids_tracked),
            (b"iids-added", m.added), (b"iids-duplicates", m.duplicates)]


def _stream(c: Client, s: Stream, argv: list[bytes]) -> bytes:
    optc = len(argv) - 3
    full = optc > 0
    count = 10  # FULL's default, so that a big stream cannot block the server
    if full:
        if optc not in (1, 3) or argv[3].lower() != b"full":
            raise subcommand_syntax_error(argv)
        if optc == 3:
            if argv[4].lower() != b"count":
                raise subcommand_syntax_error(argv)
            count = errors.parse_int_or_error(argv[5])
            if count < 0:
                count = 10
    nodes = s.num_blocks()
    fields: list[tuple[bytes, Any]] = [
        (b"length", s.length),
        (b"radix-tree-keys", nodes),
        (b"radix-tree-nodes", radix_tree_nodes(s.node_keys())),
        (b"last-generated-id", format_id(s.last_id)),
        (b"max-deleted-entry-id", format_id(s.max_deleted_entry_id)),
        (b"entries-added", s.entries_added),
        (b"recorded-first-entry-id", format_id(s.first_id)),
    ]
    fields += _idmp_fields(c, s)
    if not full:
        first = s.first_entry()
        last = s.last_entry()
        fields += [
            (b"groups", len(s.groups)),
            (b"first-entry", Raw(entry_reply(*first)) if first is not None else None),
            (b"last-entry", Raw(entry_reply(*last)) if last is not None else None),
        ]
        return encode(Map(fields), c.proto)

    limit = count or None
    entries = [Raw(entry_reply(sid, f)) for sid, f in s.range(0, MAX_ID, limit)]
    groups = []
    for name, g in sorted_groups(s):
        pel = g.pel
        pending = []
        for sid in pel.islice(0, limit):
            t, n, owner = pel[sid]
            pending.append([format_id(sid), b"" if owner is None else owner, t, n])
        consumers = []
        for cons in g.sorted_consumers():
            cpending = []
            for sid in cons.pel.islice(0, limit):
                t, n, _owner = pel[sid]
                cpending.append([format_id(sid), t, n])
            consumers.append(Map([
                (b"name", cons.name),
                (b"seen-time", cons.seen_time),
                (b"active-time", cons.active_time),
                (b"pel-count", len(cons.pel)),
                (b"pending", cpending),
            ]))
        groups.append(Map([
            (b"name", name),
            (b"last-delivered-id", format_id(g.last_id)),
            (b"entries-read", g.entries_read),
            (b"lag", g.lag(s)),
            (b"pel-count", len(pel)),
            (b"nacked-count", g.nacked_count()),  # Redis 8.8: released by XNACK
            (b"pending", pending),
            (b"consumers", consumers),
        ]))
    fields += [(b"entries", entries), (b"groups", groups)]
    return encode(Map(fields), c.proto)
