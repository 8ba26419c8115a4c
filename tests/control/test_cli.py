"""The `xshard` command line itself: --version, every --help on stdout with exit 0, option
tables generated from the config table, defaults shown. No cluster needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

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
        m = re.search(rf"^  --{re.escape(s.name)} (.*?)(?=^  -|\Z)", out, re.M | re.S)
        assert m, f"--{s.name} missing from xshard node --help"
        text = " ".join(m.group(1).split())
        assert " ".join(s.help.split())[:40] in text, (s.name, text)
        assert text.count("(default:") == 1, (s.name, text)  # one default, never two
        if "(default:" not in s.help:
            shown = s.render(s.default).decode()
            assert f"(default: {shown!r})" in text if shown == "" or " " in shown \
                else f"(default: {shown})" in text, (s.name, text)
        for alias in s.aliases:
            assert f"--{alias} " in text, (s.name, alias, text)


def test_node_help_has_the_layout_of_the_other_subcommands() -> None:
    """argparse's layout and notation, as in `xshard up --help` and `xshard router --help`:
    the option and its value on one line, the description beside or below it; yes/no."""
    node, router = cli("node", "--help").stdout, cli("router", "--help").stdout
    for out in (node, router):
        assert "\noptions:\n  -h, --help            show this help message and exit\n" in out
    assert re.search(r"^  --port N +TCP port", node, re.M), node[:600]
    assert "--appendonly yes/no " in node and "--tls-cluster yes/no " in router
    assert "yes|no" not in node


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


CLUSTER_COMMANDS = [["status"], ["create", "--shards", "3"], ["failover", "0"], ["add-shard"],
                    ["move-slots", "--to", "1", "--slots", "0-10"], ["rebalance"],
                    ["remove-shard", "1"], ["controller"]]


@pytest.mark.parametrize("args", CLUSTER_COMMANDS, ids=lambda a: a[0])
def test_a_cluster_command_without_an_etcd_says_how_to_name_one(tmp_path, args) -> None:  # noqa: ANN001
    """No --etcd, no XSHARD_ETCD, no ./.xshard: exit 1 at once with how to point it at a
    cluster, instead of trying 127.0.0.1:2379 (which may be somebody else's etcd)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XSHARD_")}
    env["PYTHONPATH"] = str(REPO)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path, env=env)
    assert r.returncode == 1, r
    for words in ("--etcd", "XSHARD_ETCD", "xshard up", "./.xshard"):
        assert words in r.stderr, (words, r.stderr)
    assert "127.0.0.1:2379 (" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 30  # no connection attempt, no retry


def test_logs_lists_the_names_that_exist(tmp_path) -> None:  # noqa: ANN001
    """`xshard logs --help` and `--list` offer the logs there are: `up` only after an
    `up --detach` wrote up.log."""
    sd = tmp_path / "state"
    (sd / "s0n0").mkdir(parents=True)
    for f in ("etcd.log", "controller.log", "router0.log", "s0n0/node.log"):
        (sd / f).write_text(f"{f} line\n")
    r = cli("logs", "--dir", str(sd), "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "one of: etcd, controller, router0, s0n0 (default: all)" in text, text
    r = cli("logs", "--dir", str(sd), "--list")
    assert (r.returncode, r.stdout.split()) == (0, ["etcd", "controller", "router0", "s0n0"]), r
    (sd / "up.log").write_text("up line\n")
    assert cli("logs", "--dir", str(sd), "--list").stdout.split()[0] == "up"
    r = cli("logs", "--dir", str(sd), "nosuch")
    assert r.returncode == 1 and "there are: up, etcd, controller, router0, s0n0" in r.stderr
    r = cli("logs", "--dir", str(tmp_path / "none"), "--help")
    assert "none here yet" in " ".join(r.stdout.split())


def test_the_controller_metrics_listen_at_bind_like_the_node_and_router() -> None:
    """The node's and the router's metrics listen at their --bind; the controller's too, with
    --metrics-bind kept as the older name of the same option."""
    from control.clusterctl import controller_parser

    p = controller_parser()
    assert p.parse_args([]).bind == "127.0.0.1"
    for opt in ("--bind", "--metrics-bind"):
        assert p.parse_args([opt, "0.0.0.0"]).bind == "0.0.0.0"
    out = " ".join(cli("controller", "--help").stdout.split())
    assert "--bind ADDR, --metrics-bind ADDR" in out, out
