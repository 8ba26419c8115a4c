"""The cluster subcommands of `xshard`: create, status, failover, controller.

They find etcd from --etcd, else $XSHARD_ETCD, else the local cluster's (./.xshard, written by
`xshard up`); without any of them they stop at once and say so. See base/etcdconn.py for auth and TLS. Bad input
and unreachable services end in one line on stderr and a non-zero exit (1 for a failure, 2 for
usage), never a traceback: these are the commands people type first.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys

from base import etcdconn
from base.etcdconn import EtcdConfig
from base.store import BaseStore, EtcdError

DEFAULT_CLUSTER = "xshard"


class CliError(Exception):
    """One line for the user; exit code 1."""


def parser(prog: str, desc: str, *, nodes: bool = False) -> argparse.ArgumentParser:
    """A subcommand's parser with the etcd options, --cluster, and (`nodes`) --node-user and
    --node-password."""
    p = argparse.ArgumentParser(prog=f"xshard {prog}", description=desc)
    etcdconn.add_arguments(p, etcd_help="etcd endpoints, a comma list of URLs (default: the "
                           "local cluster's in ./.xshard; required elsewhere)")
    p.add_argument("--cluster", default=etcdconn.default_cluster(), metavar="NAME",
                   help="cluster name, the etcd key prefix /xshard/NAME/ (default: the local "
                        f"cluster's in ./.xshard, else {DEFAULT_CLUSTER})")
    if nodes:
        p.add_argument("--node-password", default=os.environ.get("XSHARD_NODE_PASSWORD", ""),
                       metavar="PASSWORD", help="AUTH password for nodes that have "
                       "requirepass or ACL users (env XSHARD_NODE_PASSWORD)")
        p.add_argument("--node-user", default=os.environ.get("XSHARD_NODE_USER", ""),
                       metavar="USER", help="ACL user to log in to the nodes as, with "
                       "--node-password (env XSHARD_NODE_USER; default: the default user)")
    return p


def add_tls(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The tls-* options of a command that talks to nodes (node/tls.py)."""
    from node import tls

    tls.add_arguments(p, listener=False)
    return p


def node_tls(a: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context towards nodes (--tls-cluster yes), or None."""
    from node import tls

    try:
        return tls.contexts_from_args(a)[1]
    except tls.TlsError as e:
        raise CliError(f"TLS: {e}") from None


def seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0 (a usage error otherwise)."""
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text!r}")
    return v


def conn_from(a: argparse.Namespace) -> EtcdConfig:
    try:
        return etcdconn.from_args(a)
    except etcdconn.ConfigError as e:
        raise CliError(str(e)) from None


async def open_store(conn: EtcdConfig | str, cluster: str) -> BaseStore:
    from base.store import Store, Unreachable

    store = Store(conn, cluster)
    try:
        await store.connect()
    except Unreachable as e:
        await store.close()
        raise CliError(str(e)) from None
    return store


# --- create --------------------------------------------------------------------------------------

async def create(conn: EtcdConfig | str, cluster: str, shards: int) -> str:
    """Write the shards and an even slot map once; returns a one-line summary. Raises
    ClusterExists when the cluster is there already."""
    from base.records import even_slots

    if shards < 1 or shards > 16384:
        raise CliError("--shards must be between 1 and 16384")
    ids = [str(i) for i in range(shards)]
    store = await open_store(conn, cluster)
    try:
        if not await store.create_cluster(ids):
            v = await store.view()
            raise ClusterExists(cluster, len(v.shards), v.slots.mod if v.slots else 0)
    finally:
        await store.close()
    ranges = ", ".join(f"{sid}: {a}-{b}" for a, b, sid in even_slots(ids))
    return f"created cluster '{cluster}': {shards} shards ({ranges})"


class ClusterExists(CliError):
    def __init__(self, cluster: str, shards: int, revision: int) -> None:
        self.cluster, self.shards, self.revision = cluster, shards, revision
        super().__init__(f"cluster '{cluster}' already exists ({shards} shards, slot map "
                         f"revision {revision})")

    def describe(self) -> str:
        return (f"cluster '{self.cluster}' ({self.shards} shards, slot map revision "
                f"{self.revision})")


def create_parser() -> argparse.ArgumentParser:
    p = parser("create", "Create a cluster in etcd: shard records and an even slot split, once.")
    p.add_argument("--shards", type=int, required=True, help="number of shards")
    p.add_argument("--replicas", type=int, default=1, help="replicas per shard you intend to "
                   "start; only used for the advice printed (nodes join on their own; "
                   "default: 1)")
    p.add_argument("--exist-ok", action="store_true", help="succeed without change when the "
                   "cluster exists with this many shards (for install jobs that may rerun)")
    return p


def cmd_create(argv: list[str]) -> int:
    a = create_parser().parse_args(argv)
    if a.replicas < 0:
        raise CliError("--replicas must be 0 or more")
    conn = conn_from(a)
    try:
        done = asyncio.run(create(conn, a.cluster, a.shards))
    except ClusterExists as e:
        if not a.exist_ok or e.shards != a.shards:
            raise
        print(f"{e.describe()} exists already; nothing to do")
        return 0
    print(done + f"; start {a.shards * (1 + a.replicas)} nodes with --etcd {conn.url} "
          f"--cluster {a.cluster} --shard ID")
    return 0


# --- status --------------------------------------------------------------------------------------

async def status_rows(conn: EtcdConfig | str, cluster: str, node_password: str = "",
                      tls: ssl.SSLContext | None = None, node_user: str = ""
                      ) -> tuple[list[str], list[list[str]], list[str]]:
    """(header lines, table rows, lines after the table) describing every shard and node.
    Replication lag in seconds and the groups furthest behind come from the primaries'
    /metrics (nodes started with --metrics-port); without it they show as '-'."""
    from control import nodemetrics
    from node.errors import AuthError
    from node.link import NodeOps

    nodes = NodeOps(node_password, tls=tls, user=node_user)
    store = await open_store(conn, cluster)
    try:
        v = await store.view()
    finally:
        await store.close()
    if not v.shards:
        raise CliError(f"cluster '{cluster}' does not exist in etcd at {store.url} "
                       "(run xshard create)")
    offsets: dict[str, int | None] = {}
    errors: list[str] = []

    async def probe(nid: str) -> None:
        n = v.nodes[nid].value
        try:
            offsets[nid] = await nodes.offset(*nodes.addr(n))
        except Exception as e:  # noqa: BLE001 - shown as "?"
            offsets[nid] = None
            if isinstance(e, AuthError):
                errors.append(f"{nid}: {str(e)[:60]} (use --node-password)")

    metrics: dict[str, nodemetrics.PrimaryMetrics] = {}

    async def scrape(sid: str, nid: str) -> None:
        n = v.nodes[nid].value
        if n.metrics_port:
            m = await nodemetrics.fetch(n.host, n.metrics_port, sid)
            if m is not None:
                metrics[sid] = m

    primaries = [(sid, e.value.primary) for sid, e in v.shards.items()
                 if e.value.primary in v.nodes]
    await asyncio.gather(*(probe(n) for n in v.nodes), *(scrape(s, p) for s, p in primaries))
    ranges: dict[str, list[str]] = {}
    for a, b, sid in (v.slots.value if v.slots else []):
        ranges.setdefault(str(sid), []).append(f"{a}-{b}" if a != b else str(a))
    head = [f"cluster {cluster} at {store.url}: {len(v.shards)} shards, slot map revision "
            f"{v.slots.mod if v.slots else 0}, controller leader: "
            f"{v.leader.value if v.leader else 'none'}"]
    if v.migrations:
        states = [e.value.get("state") for e in v.migrations.values()]
        head.append(f"slot moves: {states.count('moving')} moving, {states.count('queued')} "
                    "queued")
    head += [f"offset unknown for {e}" for e in sorted(errors)]
    rows = [["SHARD", "EPOCH", "SLOTS", "NODE", "ROLE", "ADDRESS", "LIVE", "OFFSET",
             "LAG(BYTES)", "LAG(S)"]]
    for sid in v.shard_ids():
        rec = v.shards[sid].value
        p_off = offsets.get(rec.primary) if rec.primary else None
        members = rec.members() + sorted(n for n, e in v.nodes.items()
                                         if e.value.shard == sid and n not in rec.members())
        if not members:
            rows.append([sid, str(rec.epoch), ",".join(ranges.get(sid, [])) or "-", "-",
                         "-", "-", "-", "-", "-", "-"])
        for i, nid in enumerate(members):
            e = v.nodes.get(nid)
            role = ("primary" if nid == rec.primary else "replica" if nid in rec.replicas
                    else "joining")
            off = offsets.get(nid)
            lag = lag_s = "-"
            if role == "replica" and off is not None and p_off is not None:
                lag = str(max(0, p_off - off))
            if role == "replica" and e is not None and sid in metrics:
                secs = metrics[sid].lag_seconds.get(f"{e.value.host}:{e.value.port}")
                lag_s = f"{secs:.1f}" if secs is not None else "-"
            rows.append([sid if i == 0 else "", str(rec.epoch) if i == 0 else "",
                         (",".join(ranges.get(sid, [])) or "-") if i == 0 else "", nid, role,
                         ":".join(map(str, nodes.addr(e.value))) if e else "-",
                         "yes" if e else "no", "?" if off is None and e else
                         (str(off) if off is not None else "-"), lag, lag_s])
    tail = []
    top = nodemetrics.top_groups(list(metrics.values()))
    if top:
        tail.append("consumer groups furthest behind (from the primaries' /metrics):")
        tail.append(format_table([["SHARD", "STREAM", "GROUP", "LAG", "PENDING",
                                   "OLDEST PENDING(S)"]] + [
            [g.shard, g.stream, g.group, f"{g.lag:.0f}", f"{g.pending:.0f}",
             f"{g.oldest_pending_s:.1f}"] for g in top]))
    elif not metrics:
        tail.append("lag in seconds and consumer groups: start the nodes with --metrics-port")
    from control.streamctl import status_lines

    tail += await status_lines(v, NodeOps(node_password, timeout=2.0, tls=tls, user=node_user))
    return head, rows, tail


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
                     for r in rows)


def cmd_status(argv: list[str]) -> int:
    p = add_tls(parser("status", "Shards, roles, offsets, lag, slot ranges and epochs.",
                       nodes=True))
    a = p.parse_args(argv)
    head, rows, tail = asyncio.run(status_rows(conn_from(a), a.cluster, a.node_password,
                                               node_tls(a), a.node_user))
    print("\n".join(head))
    print(format_table(rows))
    if tail:
        print("\n".join(tail))
    return 0


# --- failover ------------------------------------------------------------------------------------

async def manual_failover(conn: EtcdConfig | str, cluster: str, shard: str, force: bool,
                          node_password: str = "", to: str | None = None,
                          timeout: float = 5.0, tls: ssl.SSLContext | None = None,
                          node_user: str = "") -> str:
    """--force, or a primary that is gone: the controller's failover (control/controller.py);
    a live primary without --force: a planned switchover (control/switchover.py)."""
    from control.controller import FailoverError, failover
    from control.switchover import switchover
    from node.link import NodeOps

    store = await open_store(conn, cluster)
    nodes = NodeOps(node_password, tls=tls, user=node_user)
    try:
        v = await store.view()
        entry = v.shards.get(shard)
        try:
            if not force and entry is not None and v.live(entry.value.primary):
                s = await switchover(store, v, shard, to=to, nodes=nodes, timeout=timeout)
                return (f"shard {shard}: {s.new} is the new primary (switchover from {s.old} "
                        f"at offset {s.offset}, epoch {s.epoch}; writes waited "
                        f"{s.paused_ms:.0f} ms)")
            if to is not None:
                raise CliError("--to picks the replica of a switchover (a live primary, "
                               "without --force)")
            new = await failover(store, v, shard, force=force, reason="manual failover",
                                 nodes=nodes)
        except FailoverError as e:
            raise CliError(str(e)) from None
    finally:
        await store.close()
    return f"shard {shard}: {new} is the new primary"


def failover_parser() -> argparse.ArgumentParser:
    p = parser("failover", "Hand a shard to one of its replicas. A live primary is switched "
               "over without losing a write: its writes wait (clients get no error) until the "
               "replica has them all, then move to the new primary. A primary that is gone "
               "(or --force) is replaced by the most up-to-date replica.", nodes=True)
    p.add_argument("shard", help="shard id (xshard status lists them)")
    p.add_argument("--to", default=None, metavar="NODE",
                   help="the replica to promote in a switchover (default: the one with the "
                        "highest offset)")
    p.add_argument("--timeout", type=seconds, default=5.0, metavar="SECONDS",
                   help="give a switchover up (the primary kept) when the replica has not "
                        "caught up in this time (default: 5)")
    p.add_argument("--force", action="store_true",
                   help="replace the primary without waiting for the replica: for a primary "
                        "that hangs (its unreplicated writes are lost)")
    p.add_argument("--if-primary", metavar="NODE", default=None,
                   help="do nothing (exit 0) unless NODE is the shard's primary and a replica "
                        "is live: a pod's preStop hook runs this on every pod")
    return add_tls(p)


def cmd_failover(argv: list[str]) -> int:
    a = failover_parser().parse_args(argv)
    conn = conn_from(a)
    if a.if_primary is not None:
        skip = asyncio.run(handover_needed(conn, a.cluster, a.shard, a.if_primary))
        if skip:
            print(f"shard {a.shard}: {skip}; nothing to do")
            return 0
    print(asyncio.run(manual_failover(conn, a.cluster, a.shard, a.force, a.node_password,
                                      a.to, a.timeout, node_tls(a), a.node_user)))
    return 0


async def handover_needed(conn: EtcdConfig | str, cluster: str, shard: str, node: str) -> str:
    """Why `node` has no primary role to hand over ("" when it has): a replica, or a
    primary without a live replica, must stop without moving anything."""
    store = await open_store(conn, cluster)
    try:
        v = await store.view()
    finally:
        await store.close()
    entry = v.shards.get(shard)
    if entry is None:
        return f"no such shard in cluster '{cluster}'"
    rec = entry.value
    if rec.primary != node:
        return f"{node} is not the primary (the primary is {rec.primary or 'none'})"
    if not any(v.live(r) for r in rec.replicas):
        return f"{node} has no live replica to hand over to"
    return ""


# --- controller ----------------------------------------------------------------------------------

def controller_parser() -> argparse.ArgumentParser:
    p = parser("controller", "Run a controller (one leader is elected in etcd).", nodes=True)
    p.add_argument("--id", default=None, help="controller id (default: host:pid)")
    p.add_argument("--logfile", default=None, help="log to this file (default: stderr)")
    p.add_argument("--move-timeout", type=seconds, default=30.0, metavar="SECONDS",
                   help="roll a started slot move back when its source or target shard has "
                   "had no live primary this long (default: 30)")
    p.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                   help="serve /metrics, /healthz and /readyz over HTTP on this port "
                   "(default: 0, off)")
    # The node's and the router's metrics listen at their --bind: so does the controller's
    # (its only listener); --metrics-bind is the older name.
    p.add_argument("--bind", "--metrics-bind", dest="bind", default="127.0.0.1", metavar="ADDR",
                   help="address to listen on: the metrics port's (default: 127.0.0.1)")
    return add_tls(p)


def cmd_controller(argv: list[str]) -> int:
    a = controller_parser().parse_args(argv)
    conn = conn_from(a)
    tls = node_tls(a)
    logging.basicConfig(level=logging.INFO, filename=a.logfile,
                        format=f"{os.getpid()}:C %(asctime)s %(levelname).1s %(message)s")
    from control.controller import run

    return run(conn, a.cluster, a.id, a.node_password, a.move_timeout, a.metrics_port,
               a.bind, tls, a.node_user)


COMMANDS = {
    "create": cmd_create, "status": cmd_status, "failover": cmd_failover,
    "controller": cmd_controller,
}


def run(cmd: str, argv: list[str]) -> int:
    """Run a cluster subcommand; CliError becomes one line on stderr and exit code 1."""
    from control.reshardctl import COMMANDS as RESHARD
    from control.streamctl import COMMANDS as STREAM

    try:
        return {**COMMANDS, **RESHARD, **STREAM}[cmd](argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    except CliError as e:
        print(f"xshard {cmd}: {e}", file=sys.stderr)
        return 1
    except EtcdError as e:  # after connect() worked: one line, not a traceback
        print(f"xshard {cmd}: etcd error: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
