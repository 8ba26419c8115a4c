"""The `xshard` command line: one entry point, a subcommand per process kind or task.

Every `--help` and `--version` prints on stdout and exits 0; a usage error prints on stderr
and exits 2; a failure prints one line on stderr and exits 1.
"""

from __future__ import annotations

import sys

USAGE = """usage: xshard <command> [options]      (xshard <command> --help for its options)

run processes:
  node      run one storage node (a Redis-compatible stream server)
  router    run one router (a RESP proxy in front of every shard)
  controller
            run a controller (failover; one leader is elected in etcd)

a local cluster (data and logs under ./.xshard):
  up        run a whole cluster: etcd, nodes, a controller, routers; restarts what dies
  down      stop the cluster that `up --detach` runs here
  logs      [NAME] [-f] | --list: show (and follow) the logs of the local cluster's
            processes, or list their names

manage a cluster (etcd from --etcd, $XSHARD_ETCD or ./.xshard):
  create    create a cluster in etcd (--shards N --replicas R)
  status    shards, roles, offsets, lag, slots and epochs
  failover  SHARD [--to NODE] [--force]: hand a shard to a replica; a live primary is
            switched over without losing a write, a dead one (or --force) replaced
  add-shard register a new, empty shard (prints its id)
  move-slots --to SHARD (--slots A-B[,C...] | --from SHARD --count N) [--wait]
            move slots online
  rebalance [--dry-run] [--wait]: even out slots over the shards
  remove-shard SHARD [--wait]: move a shard's slots away, then retire it
  stream    create|list|describe|alter|delete: partitioned streams (one stream over
            many shards)

tools:
  check-aof FILE [--fix]
            check an append-only file (or its manifest); --fix truncates a torn tail

  --version print the version and exit
"""

CLUSTER_COMMANDS = ("create", "status", "failover", "controller", "add-shard", "move-slots",
                    "rebalance", "remove-shard", "stream")
LOCAL_COMMANDS = ("down", "logs")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return v("xshard")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(USAGE.rstrip(), file=sys.stderr)
        return 2
    cmd, rest = args[0], args[1:]
    if cmd in ("-h", "--help", "help"):
        print(USAGE.rstrip())
        return 0
    if cmd in ("-V", "--version"):
        print(f"xshard {version()}")
        return 0
    if cmd == "node":
        from node.main import run

        return run(rest)
    if cmd == "router":
        from router.main import run as run_router

        return run_router(rest)
    if cmd in CLUSTER_COMMANDS:
        from control.clusterctl import run as run_cluster

        return run_cluster(cmd, rest)
    if cmd == "up":
        from control.up import run as run_up

        return run_up(rest)
    if cmd in LOCAL_COMMANDS:
        from control.localctl import run as run_local

        return run_local(cmd, rest)
    if cmd == "check-aof":
        return check_aof(rest)
    print(f"xshard: unknown command '{cmd}'\n{USAGE.rstrip()}", file=sys.stderr)
    return 2


def check_aof(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="xshard check-aof", description=(
        "Check an append-only file, or every file its manifest names; exit 0 when it loads."))
    p.add_argument("file", metavar="FILE|MANIFEST", help="an AOF file or an appendonlydir "
                   "manifest")
    p.add_argument("--fix", action="store_true", help="truncate a torn last record (the only "
                   "damage that is safe to repair)")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from node.persistence import check_aof as check

    return check(a.file, a.fix)


if __name__ == "__main__":
    sys.exit(main())
