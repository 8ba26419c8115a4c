"""The `xshard` command line: one entry point, a subcommand per process kind."""

from __future__ import annotations

import sys

USAGE = """usage: xshard <command> [options]

commands:
  node      run one storage node (a Redis-compatible stream server)
  router    run one router (a RESP proxy in front of every shard)
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
