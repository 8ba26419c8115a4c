"""The `xshard` command line: one entry point, a subcommand per process kind."""

from __future__ import annotations

import sys

USAGE = """usage: xshard <command> [options]

commands:
  node      run one storage node (a Redis-compatible stream server)
  router    run one router (a RESP proxy in front of every shard)
  up        run a whole local cluster (etcd, nodes, controller) until Ctrl-C
  create    create a cluster in etcd (--shards N --replicas R)
  status    shards, roles, offsets, lag, slots and epochs
  failover  SHARD [--force]: promote the most up-to-date replica
  controller
            run a controller (failover; one leader is elected in etcd)
  check-aof FILE [--fix]
            check an append-only file (or its manifest); --fix truncates a torn tail
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE.rstrip())
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "node":
        from node.main import run

        return run(rest)
    if cmd == "router":
        from router.main import run as run_router

        return run_router(rest)
    if cmd in ("up", "create", "status", "failover", "controller"):
        from control.clusterctl import run as run_cluster

        return run_cluster(cmd, rest)
    if cmd == "check-aof":
        args_ = [a for a in rest if a != "--fix"]
        if len(args_) != 1:
            print("usage: xshard check-aof FILE [--fix]", file=sys.stderr)
            return 2
        from node.persistence import check_aof

        return check_aof(args_[0], "--fix" in rest)
    print(f"xshard: unknown command '{cmd}'\n{USAGE.rstrip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
