"""A minimal RESP client for the control plane: one command per connection, hard timeouts.

The controller and the CLI ask nodes a handful of things (INFO replication, REPLICAOF, PING)
rarely; redis-py is only a test dependency, so this is hiredis over asyncio streams.
"""

from __future__ import annotations

import asyncio
import contextlib

import hiredis

from node.resp import encode_command


class NodeError(Exception):
    """The node answered with an error, or could not be reached in time."""


async def call(host: str, port: int, *argv: bytes | str | int, timeout: float = 1.0) -> object:
    """Send one command and return the decoded reply; raises NodeError on an error reply,
    OSError / TimeoutError when the node cannot be reached."""
    args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]

    async def run() -> object:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(encode_command(args))
            parser = hiredis.Reader()
            while True:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionResetError("connection closed by the node")
                parser.feed(data)
                reply = parser.gets()
                if reply is not False:
                    return reply
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    reply = await asyncio.wait_for(run(), timeout)
    if isinstance(reply, hiredis.ReplyError):
        raise NodeError(str(reply))
    return reply


def parse_info(raw: bytes) -> dict[str, str]:
    out = {}
    for line in raw.decode(errors="replace").splitlines():
        if ":" in line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v
    return out


async def info(host: str, port: int, section: str = "replication",
               timeout: float = 1.0) -> dict[str, str]:
    reply = await call(host, port, "INFO", section, timeout=timeout)
    return parse_info(reply if isinstance(reply, bytes) else b"")


def repl_offset(fields: dict[str, str]) -> int:
    """How much of the shard's effect stream a node holds: a replica's processed offset,
    else (a primary, or a node without replication) its own offset."""
    for k in ("slave_repl_offset", "master_repl_offset"):
        if k in fields:
            try:
                return int(fields[k])
            except ValueError:
                pass
    return 0
