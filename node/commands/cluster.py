"""CLUSTER: the Redis Cluster introspection commands, answered from `node.cluster`."""

from __future__ import annotations

from node import errors
from node.client import Client
from node.commands import command
from node.resp import ReplyError, Status, Verbatim, encode, integer
from node.slots import SLOTS, key_slot

CLUSTER_HELP = [
    b"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"COUNTKEYSINSLOT <slot>", b"    Return the number of keys in <slot>.",
    b"GETKEYSINSLOT <slot> <count>", b"    Return key names stored by current node in a slot.",
    b"INFO", b"    Return information about the cluster.",
    b"KEYSLOT <key>", b"    Return the hash slot for <key>.",
    b"MYID", b"    Return the node id.",
    b"NODES", b"    Return cluster configuration seen by node. Output format:",
    b"    <id> <ip:port@bus-port[,hostname]> <flags> <master> <pings> <pongs> <epoch> <link> "
    b"<slot> ...",
    b"SHARDS", b"    Return information about slot range mappings and the nodes "
    b"associated with them.",
    b"SLOTS", b"    Return information about slots range mappings. Each range is made of:",
    b"    start, end, master and replicas IP addresses, ports and ids",
    b"HELP", b"    Print this help.",
]


def _slot_arg(arg: bytes) -> int:
    slot = errors.parse_int_or_error(arg)
    if not 0 <= slot < SLOTS:
        raise ReplyError(errors.INVALID_SLOT)
    return slot


@command(b"cluster")
def cluster(c: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    if sub == b"help":
        return encode([Status(x) for x in CLUSTER_HELP], c.proto)
    state = c.server.cluster
    if state is None:
        raise ReplyError(errors.CLUSTER_DISABLED)
    if sub == b"keyslot":
        return integer(key_slot(argv[2]))
    if sub == b"myid":
        return encode(state.myid_redis.encode(), c.proto)
    if sub == b"slots":
        return encode(state.slots_reply(), c.proto)
    if sub == b"shards":
        return encode(state.shards_reply(), c.proto)
    if sub == b"nodes":
        return encode(Verbatim(state.nodes_text()), c.proto)
    if sub == b"info":
        return encode(Verbatim(state.info_text()), c.proto)
    if sub == b"countkeysinslot":
        return integer(len(state.keys_in_slot(_slot_arg(argv[2]))))
    if sub == b"getkeysinslot":
        slot = errors.parse_int_or_error(argv[2])
        count = errors.parse_int_or_error(argv[3])
        if not 0 <= slot < SLOTS or count < 0:
            raise ReplyError(errors.INVALID_SLOT_OR_COUNT)
        return encode(state.keys_in_slot(slot)[:count], c.proto)
    raise ReplyError(errors.unknown_subcommand(argv[1], b"CLUSTER"))
