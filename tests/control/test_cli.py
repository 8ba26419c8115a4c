"""The `xshard` command line itself: --version, every --help on stdout with exit 0, option
tables generated from the config table, defaults shown. No cluster needed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from node.config import SETTINGS
from tests.conftest import REPO

COMMANDS = ["node", "router", "up", "down", "logs", "create", "status", "failover",
            "controller", "check-aof"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_version_on_stdout() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        r = cli(flag)
        assert (r.returncode, r.stderr) == (0, ""), r
        assert r.stdout.strip() == f"xshard {version('xshard')}"


@pytest.mark.parametrize("cmd", ["", *COMMANDS])
def test_every_help_prints_on_stdout_and_exits_0(cmd: str) -> None:
    for flag in ("--help", "-h"):
        r = cli(*([cmd] if cmd else []), flag)
        assert (r.returncode, r.stderr) == (0, ""), (cmd, flag, r.stderr)
        assert r.stdout.lower().startswith("usage:"), r.stdout[:200]
        if cmd:
            assert f"xshard {cmd}" in r.stdout.splitlines()[0]


def test_top_level_usage_lists_every_command() -> None:
    out = cli("--help").stdout
    for cmd in COMMANDS:
        assert re.search(rf"^  {cmd}\b", out, re.M), cmd
    r = cli()
    assert r.returncode == 2 and r.stdout == "" and "usage:" in r.stderr  # no command: usage error
    r = cli("nosuch")
    assert r.returncode == 2 and "unknown command 'nosuch'" in r.stderr


def test_node_help_lists_every_setting_with_default_and_description() -> None:
    out = cli("node", "--help").stdout
    for s in SETTINGS:
        assert s.help, f"setting {s.name} has no description"
        m = re.search(rf"^  --{re.escape(s.name)} (.*?)(?=^  --|\Z)", out, re.M | re.S)
        assert m, f"--{s.name} missing from xshard node --help"
        text = " ".join(m.group(1).split())
        assert " ".join(s.help.split())[:40] in text, (s.name, text)
        shown = s.render(s.default).decode()
        assert f"(default: {shown!r})" in text if shown == "" or " " in shown \
            else f"(default: {shown})" in text, (s.name, text)


def test_up_help_shows_defaults_and_router_options_have_descriptions() -> None:
    out = cli("up", "--help").stdout.split("options:")[1]
    for opt, default in (("--shards", "3"), ("--replicas", "1"), ("--port", "7000"),
                         ("--router-port", "7100"), ("--routers", "1"),
                         ("--cluster", "xshard"), ("--dir", ".xshard")):
        m = re.search(rf"{opt}\b.*?\(default: ([^)]*)\)", " ".join(out.split()))
        assert m and m.group(1) == default, (opt, out)
    from router.main import build_parser

    for action in build_parser()._actions:
        assert action.help, f"router option {action.option_strings} has no description"


def test_check_aof_help_and_usage() -> None:
    r = cli("check-aof", "--help")
    assert r.returncode == 0 and "--fix" in r.stdout
    r = cli("check-aof")
    assert r.returncode == 2 and "usage: xshard check-aof" in r.stderr


def test_a_node_with_bad_etcd_settings_says_so(tmp_path) -> None:  # noqa: ANN001
    for args, words in ((["--etcd", "ftp://h:1"], "scheme must be http or https"),
                        (["--etcd", "h:1", "--etcd-user", "u"], "go together")):
        r = cli("node", "--port", "0", "--dir", str(tmp_path), *args)
        assert r.returncode == 1 and "Bad etcd settings" in r.stderr and words in r.stderr, r
        assert "Traceback" not in r.stderr
