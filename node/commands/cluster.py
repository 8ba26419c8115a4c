"""CLUSTER: the Redis Cluster introspection commands, answered from `node.cluster`."""

from __future__ import annotations

import itertools

from node import errors
from node.client import Client
from node.commands import command
from node.resp import OK, ReplyError, Status, Verbatim, encode, error, integer
from node.slots import SLOTS, key_slot
from node.tls import on_tls

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
        return encode(state.slots_reply(on_tls(c)), c.proto)
    if sub == b"shards":
        return encode(state.shards_reply(), c.proto)
    if sub == b"nodes":
        return encode(Verbatim(state.nodes_text(on_tls(c))), c.proto)
    if sub == b"info":
        return encode(Verbatim(state.info_text()), c.proto)
    if sub == b"countkeysinslot":
        return integer(c.db.count_in_slot(_slot_arg(argv[2])))
    if sub == b"getkeysinslot":
        slot = errors.parse_int_or_error(argv[2])
        count = errors.parse_int_or_error(argv[3])
        if not 0 <= slot < SLOTS or count < 0:
            raise ReplyError(errors.INVALID_SLOT_OR_COUNT)
        keys = c.db.slots.get(slot, ())
        return encode(list(itertools.islice(keys, count)), c.proto)
    if sub == b"setslot":
        return _setslot(c, state, argv)
    raise ReplyError(errors.unknown_subcommand(argv[1], b"CLUSTER"))


def _setslot(c: Client, state, argv: list[bytes]) -> bytes:  # noqa: ANN001 - ClusterState
    """CLUSTER SETSLOT slot IMPORTING node | MIGRATING node | NODE node | STABLE, node-local
    (the slot map itself changes in etcd, node/membership/slotmover.py). IMPORTING on a slot this
    node does not own also marks the connection as the importer of the slot and drops keys
    a previous, unfinished import left there, so a move that starts over starts clean."""
    from node.slotmove import drop_slot

    slot = errors.string2ll(argv[2])
    if slot is None or not 0 <= slot < SLOTS:
        raise ReplyError(errors.SETSLOT_BAD_SLOT)
    action = argv[3].lower()
    if action == b"stable" and len(argv) == 4:
        state.importing.pop(slot, None)
        state.migrating.pop(slot, None)
        return OK
    if len(argv) != 5 or action not in (b"importing", b"migrating", b"node"):
        raise ReplyError(errors.SETSLOT_SYNTAX)
    node = state.node_by_rid(argv[4].decode(errors="replace"))
    if node is None:
        raise ReplyError(errors.setslot_unknown_node(argv[4]))
    mine = state.owner_of(slot) == state.myshard
    if action == b"migrating":
        if not mine:
            raise ReplyError(errors.setslot_not_owner(slot))
        state.migrating[slot] = node.id
    elif action == b"importing":
        if mine:
            raise ReplyError(errors.setslot_already_owner(slot))
        drop_slot(c.server, slot, b"")
        state.importing[slot] = node.id
        c.import_slots.add(slot)
    else:
        if node.shard != state.myshard and mine and c.db.count_in_slot(slot):
            raise ReplyError(errors.setslot_still_has_keys(slot))
        if node.shard == state.myshard and not mine and slot in state.importing \
                and slot not in state.migrations:
            _claim(c, argv, slot)  # a hand-driven move (redis-cli --cluster reshard)
        state.set_owner(slot, node.shard)
    return OK


def _claim(c: Client, argv: list[bytes], slot: int) -> None:
    """SETSLOT NODE <me> on the node importing a slot by hand: etcd holds the slot map, so the
    new owner is written there (one transaction) before the reply. An owner set only here
    would last until the next view, and the keys MIGRATE brought would then be dropped as
    another shard's."""
    import asyncio

    from node.blocking import Blocked

    mover = getattr(getattr(c.server, "agent", None), "mover", None)
    if mover is None:
        raise ReplyError(errors.setslot_claim_failed(slot, "no etcd agent"))
    if c.in_exec:
        raise ReplyError(errors.setslot_claim_failed(slot, "not inside MULTI"))
    b = Blocked([], 0, argv)

    async def claim() -> None:
        try:
            err = await mover.claim(slot)
        except Exception as e:  # noqa: BLE001 - a bug must not leave the client parked
            err = str(e) or type(e).__name__
        if err is None:
            c.server.cluster.set_owner(slot, c.server.cluster.myshard)
            reply = OK
        else:
            reply = error(errors.setslot_claim_failed(slot, err))
        if c.blocked is b:
            if reply[:1] == b"-":
                c.server.stats.error(reply[1:-2])
            c.server.blocking.unblock(c, reply)

    asyncio.ensure_future(claim())
    raise b
