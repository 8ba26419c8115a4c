"""The resharding subcommands of `xshard`: add-shard, move-slots, rebalance, remove-shard.

They queue moves in etcd (control/reshard.py) and return; with `--wait` they show progress
(slots, keys, bytes, rate) until every move has completed and exit 0 only then. Moves live in
etcd, so an interrupted `--wait` loses nothing: the cluster carries on, and the same command
with `--resume` waits for the moves it had queued.
"""

from __future__ import annotations

import asyncio
import sys
import time

from control.clusterctl import CliError, conn_from, open_store, parser
from control.records import View, owners
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
from control.store import BaseStore


def _wait_args(p) -> None:  # noqa: ANN001 - argparse.ArgumentParser
    p.add_argument("--wait", action="store_true", help="wait until every move has completed "
                   "(exit 0 only then), showing progress")
    p.add_argument("--resume", action="store_true", help="adopt moves of these slots that "
                   "are already queued to the same shard (to wait for an interrupted run)")
    p.add_argument("--timeout", type=float, default=0, metavar="SECONDS",
                   help="with --wait: give up after this long (default: never)")


async def _node_totals(v: View, password: str) -> tuple[int, int]:
    """(keys, bytes) the primaries have sent in slot moves, from INFO cluster."""
    from control.nodeclient import NodeOps, info

    ops = NodeOps(password)
    keys = nbytes = 0

    async def one(nid: str) -> tuple[int, int]:
        n = v.nodes[nid].value
        try:
            f = await info(n.host, n.port, "cluster", timeout=ops.timeout, password=password)
        except Exception:  # noqa: BLE001 - progress only
            return 0, 0
        return int(f.get("slot_move_keys_sent", 0)), int(f.get("slot_move_bytes_sent", 0))

    prims = [e.value.primary for e in v.shards.values() if v.live(e.value.primary)]
    for k, b in await asyncio.gather(*(one(p) for p in prims)):
        keys += k
        nbytes += b
    return keys, nbytes


async def wait_moves(store: BaseStore, moves: list[Move], timeout: float = 0,
                     password: str = "", out=sys.stderr) -> None:  # noqa: ANN001
    """Progress until every move is done (its slot owned by its target, no record left)."""
    total = len(moves)
    t0 = time.monotonic()
    base = None
    tty = out.isatty()
    last = ""
    while True:
        v = await store.view()
        owner = owners(v.slots.value) if v.slots else [None] * 16384
        done = 0
        failed = []
        for m in moves:
            rec = v.migrations.get(m.slot)
            if rec is None:
                if owner[m.slot] == m.dst:
                    done += 1
                else:
                    failed.append(m)
        keys, nbytes = await _node_totals(v, password)
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


async def _run(a, plan) -> int:  # noqa: ANN001
    """Open the store, plan (a function of the view), queue, print, maybe wait."""
    store = await open_store(conn_from(a), a.cluster)
    try:
        v = await store.view()
        if not v.shards:
            raise CliError(f"cluster '{a.cluster}' does not exist (run xshard create)")
        moves = plan(v)
        if getattr(a, "dry_run", False):
            for m in moves:
                print(f"slot {m.slot}: shard {m.src} -> shard {m.dst}")
            print(f"{len(moves)} moves (dry run: nothing queued)")
            return 0
        fresh, adopted = await queue(store, v, moves, a.resume)
        print(f"queued {len(fresh)} slot moves" + (f", {len(adopted)} already queued"
                                                  if adopted else ""))
        if a.wait and moves:
            await wait_moves(store, moves, a.timeout, getattr(a, "node_password", ""))
            print(f"done: {len(moves)} slots moved")
        return 0
    except ReshardError as e:
        raise CliError(str(e)) from None
    finally:
        await store.close()


def _need_shard(v: View, shard: str) -> None:
    if shard not in v.shards:
        raise ReshardError(f"unknown shard '{shard}' (shards: {', '.join(v.shard_ids())})")


def cmd_add_shard(argv: list[str]) -> int:
    p = parser("add-shard", "Register a new, empty shard and print its id (on the last line). "
               "Start its nodes with `xshard node ... --shard ID` (the first one becomes the "
               "primary), then move slots to it (move-slots or rebalance).")
    a = p.parse_args(argv)

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


def cmd_move_slots(argv: list[str]) -> int:
    p = parser("move-slots", "Move slots to a shard, online.", nodes=True)
    p.add_argument("--to", required=True, metavar="SHARD", help="the shard to move them to")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--slots", metavar="A-B[,C...]", help="the slots to move")
    g.add_argument("--from", dest="src", metavar="SHARD", help="move --count slots of this shard")
    p.add_argument("--count", type=int, default=0, help="with --from: how many slots")
    _wait_args(p)
    a = p.parse_args(argv)
    if a.src is not None and a.count <= 0:
        raise CliError("--from needs --count N (N > 0)")

    def plan(v: View) -> list[Move]:
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


def cmd_rebalance(argv: list[str]) -> int:
    p = parser("rebalance", "Even out slots over every shard that has a live primary "
               "(weighted by slot count).", nodes=True)
    p.add_argument("--dry-run", action="store_true", help="print the moves, queue nothing")
    _wait_args(p)
    a = p.parse_args(argv)

    def plan(v: View) -> list[Move]:
        owner = owners(v.slots.value) if v.slots else [None] * 16384
        return plan_even(owner, live_shards(v))

    return asyncio.run(_run(a, plan))


def cmd_remove_shard(argv: list[str]) -> int:
    p = parser("remove-shard", "Move every slot of a shard to the others, then retire it "
               "(its record goes; stop its nodes afterwards).", nodes=True)
    p.add_argument("shard", help="the shard to remove")
    _wait_args(p)
    a = p.parse_args(argv)

    def plan(v: View) -> list[Move]:
        _need_shard(v, a.shard)
        owner = owners(v.slots.value) if v.slots else [None] * 16384
        return plan_remove(owner, a.shard, [s for s in live_shards(v) if s != a.shard])

    rc = asyncio.run(_run(a, plan))

    async def retire() -> bool:
        store = await open_store(conn_from(a), a.cluster)
        try:
            v = await store.view()
            if any(o == a.shard for o in owners(v.slots.value if v.slots else [])):
                return False
            await retire_shard(store, a.shard)
            return True
        except ReshardError as e:
            raise CliError(str(e)) from None
        finally:
            await store.close()

    if asyncio.run(retire()):
        print(f"shard {a.shard} retired")
    else:
        print(f"shard {a.shard} is retired once its slots have moved: run `xshard "
              f"remove-shard {a.shard}` again then (or use --wait)")
    return rc


COMMANDS = {"add-shard": cmd_add_shard, "move-slots": cmd_move_slots,
            "rebalance": cmd_rebalance, "remove-shard": cmd_remove_shard}
