"""The routers' ACL users, kept in etcd so that a change sent to any router holds on all.

The users are one etcd key, `acl/users`, holding ACL LIST lines (the aclfile format). ACL
SETUSER and DELUSER on a router are applied to the users read from etcd and written back in
one transaction guarded by the key's mod revision, retried when another router won the race;
the client gets its reply once etcd has the change. Every router applies the key whenever its
watch sees it change (router/topology.py), so its clients are re-checked against the new rules
at once. Without the key (a new cluster) the routers keep their own default user
(--requirepass) until the first change writes it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from node import errors
from node.acl import Acl, parse_users
from node.commands.acl import acl as acl_handler
from node.resp import OK, ReplyError, error, integer
from router.commands import router_command

if TYPE_CHECKING:
    from base.records import Entry
    from base.store import BaseStore
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router

log = logging.getLogger("xshard.router")

KEY = "acl/users"
ATTEMPTS = 20


class AclSync:
    """Reads and writes the routers' users in etcd for one router."""

    def __init__(self, router: Router, store: BaseStore) -> None:
        self.router = router
        self.store = store
        self.mod = 0  # mod revision of the users last applied

    def apply(self, entry: Entry[bytes] | None) -> None:
        """A view's `acl/users`: take it when it changed (a bad value is logged, not taken)."""
        if entry is None or entry.mod == self.mod:
            return
        try:
            users = parse_users(entry.value, "etcd " + KEY)
        except ReplyError as e:
            log.error("ignoring the ACL users in etcd: %s", e.message.decode(errors="replace"))
            return
        self.mod = entry.mod
        self.router.acl.replace(users)

    async def change(self, argv: list[bytes]) -> bytes:
        """Apply ACL SETUSER/DELUSER to etcd's users; the reply once etcd has it."""
        key = self.store.key(KEY)
        for _ in range(ATTEMPTS):
            view = await self.store.view()
            scratch = Acl()
            entry = view.acl
            if entry is not None:
                scratch.replace(parse_users(entry.value, "etcd " + KEY))
            else:  # the first change: start from this router's users
                scratch.replace(dict(self.router.acl.users))
            if argv[1].lower() == b"setuser":
                scratch.setuser(argv[2], argv[3:])
                reply = OK
            else:
                reply = integer(scratch.deluser(argv[2:]))
            mod = entry.mod if entry is not None else 0
            if await self.store.commit([self.store.guard(key, mod)], [(key, scratch.text(), 0)]):
                view = await self.store.view()
                self.apply(view.acl)
                return reply
        raise ReplyError(errors.ACL_SYNC_BUSY)


@router_command(b"acl|setuser", b"acl|deluser")
def acl_change(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """Validated here first (a bad rule never reaches etcd), then written through etcd."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    sync = router.acl_sync
    if sync is None:  # a static topology: this router's users only
        conn.fill(cell, acl_handler(c, argv))
        return
    probe = Acl()
    probe.replace(dict(router.acl.users))
    if argv[1].lower() == b"setuser":
        probe.setuser(argv[2], argv[3:])  # ReplyError: the dispatcher replies with it
    else:
        probe.deluser(argv[2:])
    task = asyncio.ensure_future(sync.change(argv))

    def done(t: asyncio.Task) -> None:
        try:
            conn.fill(cell, t.result())
        except ReplyError as e:
            conn.fill(cell, error(e.message))
        except Exception as e:  # noqa: BLE001 - etcd away: the client gets an error
            conn.fill(cell, error(errors.acl_sync_failed(type(e).__name__)))

    task.add_done_callback(done)
