"""The `xshard` command line: one entry point, a subcommand per process kind."""

from __future__ import annotations

import sys

USAGE = """usage: xshard <command> [options]

commands:
  node      run one storage node (a Redis-compatible stream server)
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
    print(f"xshard: unknown command '{cmd}'\n{USAGE.rstrip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
