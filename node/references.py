"""Consumer-group references to stream entries: the KEEPREF / DELREF / ACKED policies of
Redis 8.2 (XADD and XTRIM trimming, XDELEX, XACKDEL). Data only, like node/stream.py and
node/groups.py: the command modules parse, call these, reply and emit effects.

A group *references* an entry while it still needs it: the entry is in the group's PEL
(delivered, not acknowledged) or after the group's last-delivered ID (not delivered yet).
An entry no group references has been read and acknowledged by every group.

- KEEPREF (the default, Redis 7's behaviour): delete or trim, leave the PELs alone.
- DELREF: also remove the deleted IDs from every group's PEL, so no PEL keeps a dangling ID.
- ACKED: delete only entries that no group references. A trim removes the oldest entries up
  to the first one that some group still references and stops there, so it always removes a
  prefix of the stream (Redis's documentation leaves open whether it skips such an entry and
  goes on; docs/compatibility.md says so). With no consumer group nothing is referenced and
  ACKED is KEEPREF.
"""

from __future__ import annotations

from node.stream import Stream
from node.streamid import MAX_ID

__all__ = ["KEEPREF", "DELREF", "ACKED", "POLICIES", "POLICY_NAMES", "referenced",
           "acked_below", "drop_references", "delete_entry", "trim"]

KEEPREF, DELREF, ACKED = 0, 1, 2
POLICIES = {b"keepref": KEEPREF, b"delref": DELREF, b"acked": ACKED}
POLICY_NAMES = {KEEPREF: b"KEEPREF", DELREF: b"DELREF", ACKED: b"ACKED"}

# XDELEX / XACKDEL replies per ID.
NOT_FOUND, DELETED, STILL_REFERENCED = -1, 1, 2


def referenced(s: Stream, sid: int) -> bool:
    """Does some group still need entry `sid` (pending, or not delivered yet)?"""
    for g in s.groups.values():
        if sid > g.last_id or sid in g.pel:
            return True
    return False


def acked_below(s: Stream) -> int:
    """The first live ID some group references (MAX_ID + 1 if none): every entry below it
    was read and acknowledged by every group. A pending ID whose entry is gone (trimmed or
    deleted with KEEPREF) references nothing and does not hold a trim back."""
    cap = MAX_ID + 1
    for g in s.groups.values():
        if g.last_id < cap:
            cap = g.last_id + 1
        for sid in g.pel.irange(s.first_id, cap, inclusive=(True, False)):
            if sid in s:
                cap = sid
                break
    return cap


def drop_references(s: Stream, lo: int, hi: int) -> int:
    """DELREF: remove the pending IDs in [lo, hi] from every group; returns how many."""
    n = 0
    for g in s.groups.values():
        sids = list(g.pel.irange(lo, hi))
        if sids:
            n += g.ack_many(sids)
    return n


def delete_entry(s: Stream, sid: int, policy: int) -> int:
    """XDELEX of one ID: NOT_FOUND, DELETED, or STILL_REFERENCED (ACKED keeps it)."""
    if sid not in s:
        return NOT_FOUND
    if policy == ACKED and referenced(s, sid):
        return STILL_REFERENCED
    s.delete(sid)
    if policy == DELREF:
        drop_references(s, sid, sid)
    return DELETED


def trim(s: Stream, strategy: str, threshold: int, approx: bool, limit: int, policy: int
         ) -> tuple[int, int]:
    """Stream.trim under a policy: (entries removed, the ID it could not pass: ACKED's
    `acked_below`, else MAX_ID + 1). DELREF drops the PEL IDs of the range it cut, from the
    old first entry up to the new one (IDs of entries deleted before inside that range too)."""
    stop = acked_below(s) if policy == ACKED and s.groups else MAX_ID + 1
    lo = s.first_id
    last = s.last_valid_id() if policy == DELREF else 0
    deleted = s.trim(strategy, threshold, approx, limit, stop)
    if deleted and policy == DELREF and s.groups:
        drop_references(s, lo, s.first_id - 1 if s.length else last)
    return deleted, stop
