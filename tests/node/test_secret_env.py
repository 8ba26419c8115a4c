"""Passwords from the environment (node/config.py `env`, router/main.py): a node or router
gets requirepass, masterauth and the nodes' password without them on argv, which `ps` and
/proc/PID/cmdline show to anyone on the machine. The command line and the config file still
win, and CONFIG GET requirepass answers as Redis does (the password)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import redis

from node.config import SETTINGS
from tests.conftest import _node_env


def _env(**kw: str) -> dict[str, str]:
    env = {k: v for k, v in _node_env().items() if not k.startswith("XSHARD_")}
    return {**env, **kw}


def _cmdline(n) -> bytes:  # noqa: ANN001
    return Path(f"/proc/{n.proc.popen.pid}/cmdline").read_bytes()


def test_a_node_takes_its_passwords_from_the_environment(xnode) -> None:  # noqa: ANN001
    n = xnode(env=_env(XSHARD_REQUIREPASS="env-pass", XSHARD_MASTERAUTH="env-master"))
    with pytest.raises(redis.AuthenticationError):
        n.client().xlen("s")
    r = n.client(password="env-pass")
    assert r.xlen("s") == 0
    # Redis's behaviour: CONFIG GET shows requirepass and masterauth.
    assert r.config_get("requirepass") == {"requirepass": "env-pass"}
    assert r.config_get("masterauth") == {"masterauth": "env-master"}
    assert b"env-pass" not in _cmdline(n) and b"env-master" not in _cmdline(n)


def test_the_command_line_wins_over_the_environment(xnode) -> None:  # noqa: ANN001
    n = xnode("--requirepass", "argv-pass", env=_env(XSHARD_REQUIREPASS="env-pass"))
    assert n.client(password="argv-pass").ping()
    with pytest.raises(redis.AuthenticationError):
        n.client(password="env-pass").ping()


def test_every_password_setting_has_an_environment_variable() -> None:
    secrets = {s.name for s in SETTINGS if "pass" in s.name or s.name == "masterauth"}
    # etcd-password: the etcd client reads XSHARD_ETCD_PASSWORD itself (base/etcdconn.py).
    assert {s.name for s in SETTINGS if s.env} == secrets - {"etcd-password"}


def test_the_router_and_controller_take_their_passwords_from_the_environment(tmp_path: Path) -> None:
    from router.main import parse_args

    topo = tmp_path / "t.json"
    topo.write_text("{}")
    env = {"XSHARD_REQUIREPASS": "r-pass", "XSHARD_NODE_PASSWORD": "n-pass",
           "XSHARD_NODE_USER": "u"}
    with mock.patch.dict("os.environ", env):
        a = parse_args(["--topology", str(topo)])
        assert (a.requirepass, a.node_password, a.node_user) == ("r-pass", "n-pass", "u")
        a = parse_args(["--topology", str(topo), "--requirepass", "argv"])
        assert a.requirepass == "argv"

    from control.clusterctl import controller_parser

    env = {"XSHARD_TLS_KEY_FILE_PASS": "k-pass", "XSHARD_TLS_CLIENT_KEY_FILE_PASS": "c-pass",
           "XSHARD_NODE_PASSWORD": "n-pass"}
    with mock.patch.dict("os.environ", env):
        for a in (parse_args(["--topology", str(topo)]), controller_parser().parse_args([])):
            assert (a.tls_key_file_pass, a.tls_client_key_file_pass) == ("k-pass", "c-pass")
            assert a.node_password == "n-pass"
