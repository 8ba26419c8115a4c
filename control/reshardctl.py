"""The resharding subcommands of `xshard`: add-shard, move-slots, rebalance, remove-shard.

They queue moves in etcd (control/reshard.py) and return; with `--wait` they show progress
(slots, keys, bytes, rate) until every move has completed and exit 0 only then. Moves live in
etcd, so an interrupted `--wait` loses nothing: the cluster carries on, and the same command
with `--resume` waits for the moves it had queued.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import time

from base.records import View, owners
from base.store import BaseStore
from control.clusterctl import CliError, add_tls, conn_from, node_tls, open_store, parser
from control.reshard import (
    Move,
    ReshardError,
    add_shard,
    live_shards,
    parse_slots,
    plan_even,
    plan_remove,
    queue,
    retire_shard,
)
from node.errors import ResponseError
from node.link import NodeOps, call_all
from node.slots import SLOTS, key_slot


def _wait_args(p) -> None:  # noqa: ANN001 - argparse.ArgumentParser
    """--wait, --resume, --timeout, and the TLS options towards the nodes."""
    p.add_argument("--wait", action="store_true", help="wait until every move has completed "
                   "(exit 0 only then), showing progress")
    p.add_argument("--resume", action="store_true", help="adopt moves of these slots that "
                   "are already queued to the same shard (to wait for an interrupted run)")
    p.add_argument("--timeout", type=float, default=0, metavar="SECONDS",
                   help="with --wait: give up after this long (default: never)")
    add_tls(p)  # --tls-cluster: the nodes' progress (and --by memory's sizes) over TLS


async def _node_totals(v: View, password: str, user: str = "",
                       tls: ssl.SSLContext | None = None) -> tuple[int, int]:
    """(keys, bytes) the primaries have sent in slot moves, from INFO cluster."""
    from node.link import NodeOps, info

    ops = NodeOps(password, tls=tls, user=user)
    keys = nbytes = 0

    async def one(nid: str) -> tuple[int, int]:
        n = v.nodes[nid].value
        try:
            f = await info(*ops.addr(n), "cluster", timeout=ops.timeout, password=password,
                           user=user, ssl=tls)
        except Exception:  # noqa: BLE001 - progress only
            return 0, 0
        return int(f.get("slot_move_keys_sent", 0)), int(f.get("slot_move_bytes_sent", 0))

    prims = [e.value.primary for e in v.shards.values() if v.live(e.value.primary)]
    for k, b in await asyncio.gather(*(one(p) for p in prims)):
        keys += k
        nbytes += b
    return keys, nbytes


async def wait_moves(store: BaseStore, moves: list[Move], timeout: float = 0,
                     password: str = "", out=sys.stderr, user: str = "",  # noqa: ANN001
                     tls: ssl.SSLContext | None = None) -> None:
    """Progress until every move is done (its slot owned by its target, no record left)."""
    total = len(moves)
    t0 = time.monotonic()
    base = None
    tty = out.isatty()
    last = ""
    while True:
        v = await store.view()
        owner = owners(v.slots.value) if v.slots else [None] * SLOTS
        done = 0
        failed = []
        for m in moves:
            rec = v.migrations.get(m.slot)
            if rec is None:
                if owner[m.slot] == m.dst:
                    done += 1
                else:
                    failed.append(m)
        keys, nbytes = await _node_totals(v, password, user, tls)
        if base is None:
            base = (keys, nbytes)
        el = time.monotonic() - t0
        dk, db = keys - base[0], nbytes - base[1]
        width = 30
        bar = "#" * int(width * done / max(total, 1))
        line = (f"[{bar:<{width}}] {done}/{total} slots, {dk} keys, {db / 1e6:.1f} MB, "
                f"{done / el if el > 0 else 0:.1f} slots/s, {db / 1e6 / el if el > 0 else 0:.2f}"
                " MB/s")
        if tty:
            print("\r" + line, end="", file=out, flush=True)
        elif line != last and (done == total or int(el) % 5 == 0):
            print(line, file=out, flush=True)
        last = line
        if failed:
            if tty:
                print(file=out)
            raise CliError(f"{len(failed)} moves ended without their slot reaching the target "
                           f"(e.g. slot {failed[0].slot}: rolled back); run the command again")
        if done == total:
            if tty:
                print(file=out)
            return
        if timeout and el > timeout:
            if tty:
                print(file=out)
            raise CliError(f"timed out after {timeout:.0f}s with {total - done} moves left "
                           "(they go on; --resume waits for them)")
        await asyncio.sleep(0.3)


async def _run(a, plan, weights=None) -> int:  # noqa: ANN001
    """Open the store, plan (a function of the view and the slot weights), queue, print,
    maybe wait."""
    store = await open_store(conn_from(a), a.cluster)
    try:
        v = await store.view()
        if not v.shards:
            raise CliError(f"cluster '{a.cluster}' does not exist (run xshard create)")
        w = await weights(v) if weights is not None else None
        if w is not None:
            v = await store.view()  # queue against the map as it is after the sizing
        moves = plan(v, w)
        if getattr(a, "dry_run", False):
            for m in moves:
                print(f"slot {m.slot}: shard {m.src} -> shard {m.dst}")
            print(f"{len(moves)} moves (dry run: nothing queued)")
            return 0
        fresh, adopted = await queue(store, v, moves, a.resume)
        print(f"queued {len(fresh)} slot moves" + (f", {len(adopted)} already queued"
                                                  if adopted else ""))
        if a.wait and moves:
            await wait_moves(store, moves, a.timeout, getattr(a, "node_password", ""),
                             user=getattr(a, "node_user", ""), tls=node_tls(a))
            print(f"done: {len(moves)} slots moved")
        return 0
    except ReshardError as e:
        raise CliError(str(e)) from None
    finally:
        await store.close()


def _need_shard(v: View, shard: str) -> None:
    if shard not in v.shards:
        raise ReshardError(f"unknown shard '{shard}' (shards: {', '.join(v.shard_ids())})")


def add_shard_parser() -> argparse.ArgumentParser:
    return parser("add-shard", "Register a new, empty shard and print its id (on the last "
                  "line). Start its nodes with `xshard node ... --shard ID` (the first one "
                  "becomes the primary), then move slots to it (move-slots or rebalance).")


def cmd_add_shard(argv: list[str]) -> int:
    a = add_shard_parser().parse_args(argv)

    async def go() -> str:
        store = await open_store(conn_from(a), a.cluster)
        try:
            return await add_shard(store)
        finally:
            await store.close()

    sid = asyncio.run(go())
    print(f"added shard {sid} to cluster '{a.cluster}'; start its nodes with --shard {sid}")
    print(sid)
    return 0


def move_slots_parser() -> argparse.ArgumentParser:
    p = parser("move-slots", "Move slots to a shard, online.", nodes=True)
    p.add_argument("--to", required=True, metavar="SHARD", help="the shard to move them to")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--slots", metavar="A-B[,C...]", help="the slots to move")
    g.add_argument("--from", dest="src", metavar="SHARD", help="move --count slots of this shard")
    p.add_argument("--count", type=int, default=0, help="with --from: how many slots")
    _wait_args(p)
    return p


def cmd_move_slots(argv: list[str]) -> int:
    a = move_slots_parser().parse_args(argv)
    if a.src is not None and a.count <= 0:
        raise CliError("--from needs --count N (N > 0)")

    def plan(v: View, _w: object) -> list[Move]:
        _need_shard(v, a.to)
        owner = owners(v.slots.value) if v.slots else []
        if a.slots:
            slots = parse_slots(a.slots)
        else:
            _need_shard(v, a.src)
            held = [s for s, o in enumerate(owner) if o == a.src]
            if a.src == a.to:
                raise ReshardError("--from and --to name the same shard")
            if len(held) < a.count:
                raise ReshardError(f"shard {a.src} owns {len(held)} slots, fewer than "
                                   f"--count {a.count}")
            slots = held[len(held) - a.count:]
        return [Move(s, str(owner[s]), a.to) for s in slots if owner[s] != a.to]

    return asyncio.run(_run(a, plan))


async def slot_weights(v: View, password: str = "", batch: int = 500,
                       user: str = "", tls: ssl.SSLContext | None = None) -> dict[int, int]:
    """Key bytes per slot (MEMORY USAGE of every key), from each live primary's own slots:
    SCAN, then the sizes asked in pipelined batches."""
    owner = owners(v.slots.value) if v.slots else [None] * SLOTS
    weight: dict[int, int] = {}
    for sid in live_shards(v):
        n = v.nodes[v.shards[sid].value.primary].value  # type: ignore[index]
        try:
            await _shard_weights(*NodeOps(tls=tls).addr(n), sid, owner, weight, password,
                                 batch, user, tls)
        except (OSError, TimeoutError, ResponseError) as e:
            raise CliError(f"cannot size the keys of shard {sid} on {n.id}: {e!r}") from None
    return weight


async def _shard_weights(host: str, port: int, sid: str, owner: list[str | None],
                         weight: dict[int, int], password: str, batch: int,
                         user: str = "", tls: ssl.SSLContext | None = None) -> None:
    cursor = b"0"
    while True:
        got = (await call_all(host, port, [["SCAN", cursor, "COUNT", batch]], timeout=10,
                              password=password, user=user, ssl=tls))[0]
        if not isinstance(got, list):
            raise CliError(f"SCAN on {host}:{port} answered {got!r}")
        cursor, keys = got
        keys = [k for k in keys if owner[key_slot(k)] == sid]
        sizes = await call_all(host, port, [["MEMORY", "USAGE", k] for k in keys], timeout=30,
                               password=password, user=user, ssl=tls) if keys else []
        for k, size in zip(keys, sizes, strict=True):
            if isinstance(size, int):
                slot = key_slot(k)
                weight[slot] = weight.get(slot, 0) + size
        if cursor == b"0":
            return


def rebalance_parser() -> argparse.ArgumentParser:
    p = parser("rebalance", "Even out slots over every shard that has a live primary: by slot "
               "count, or by the bytes of their keys (--by memory).", nodes=True)
    p.add_argument("--by", choices=("slots", "memory"), default="slots",
                   help="what to even out: the number of slots (default) or the key bytes "
                   "(MEMORY USAGE of every key, asked of each primary)")
    p.add_argument("--dry-run", action="store_true", help="print the moves, queue nothing")
    _wait_args(p)
    return p


def cmd_rebalance(argv: list[str]) -> int:
    a = rebalance_parser().parse_args(argv)

    async def weights(v: View) -> dict[int, int] | None:
        return await slot_weights(v, a.node_password, user=a.node_user,
                                  tls=node_tls(a)) if a.by == "memory" \
            else None

    def plan(v: View, w: dict[int, int] | None) -> list[Move]:
        owner = owners(v.slots.value) if v.slots else [None] * SLOTS
        return plan_even(owner, live_shards(v), w)

    return asyncio.run(_run(a, plan, weights))


def remove_shard_parser() -> argparse.ArgumentParser:
    p = parser("remove-shard", "Move every slot of the shards to the others, then retire them "
               "(their records go; stop their nodes afterwards).", nodes=True)
    p.add_argument("shards", nargs="+", metavar="SHARD", help="the shards to remove")
    _wait_args(p)
    return p


def cmd_remove_shard(argv: list[str]) -> int:
    a = remove_shard_parser().parse_args(argv)
    gone = list(dict.fromkeys(a.shards))

    def plan(v: View, _w: object) -> list[Move]:
        for sid in gone:
            _need_shard(v, sid)
        owner = owners(v.slots.value) if v.slots else [None] * SLOTS
        return plan_remove(owner, gone, [s for s in live_shards(v) if s not in gone])

    rc = asyncio.run(_run(a, plan))

    async def retire() -> list[str]:
        store = await open_store(conn_from(a), a.cluster)
        try:
            v = await store.view()
            held = set(owners(v.slots.value if v.slots else []))
            done = []
            for sid in gone:
                if sid not in held:
                    await retire_shard(store, sid)
                    done.append(sid)
            return done
        except ReshardError as e:
            raise CliError(str(e)) from None
        finally:
            await store.close()

    retired = asyncio.run(retire())
    for sid in gone:
        if sid in retired:
            print(f"shard {sid} retired")
        else:
            print(f"shard {sid} is retired once its slots have moved: run `xshard "
                  f"remove-shard {sid}` again then (or use --wait)")
    return rc


COMMANDS = {"add-shard": cmd_add_shard, "move-slots": cmd_move_slots,
            "rebalance": cmd_rebalance, "remove-shard": cmd_remove_shard}
