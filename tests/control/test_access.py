"""How the control plane reaches etcd and the nodes in production set-ups: AUTH to nodes with
requirepass, a comma list of etcd endpoints with failover between them, etcd's own
user/password auth, and TLS to etcd (certificates made in the test). Real etcd, real nodes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from base.lease import POLICY, LeaseSession
from base.records import NodeRecord, owners
from base.store import Store, read_view
from control.certs import make_tls
from tests.conftest import REPO
from tests.support.cluster import keys_in_slots, run_cli
from tests.support.etcdmembers import EtcdMembers
from tests.support.procs import ServerProcess, free_port, wait_until

pytestmark = pytest.mark.etcd


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[EtcdMembers]]:
    """Collects EtcdMembers a test starts and stops them at teardown."""
    made: list[EtcdMembers] = []
    yield made
    for m in made:
        m.stop()


def _controller(c, *extra: str) -> ServerProcess:  # noqa: ANN001
    p = ServerProcess("controller-auth", lambda _port: [
        sys.executable, "-m", "control.cli", "controller", "--etcd", c.url, "--cluster", c.name,
        "--id", "ctl-auth", *extra], c.base / "controller-auth.log", cwd=REPO,
        probe=lambda h, p: True)
    c.controllers.append(p)
    return p.start()


# --- AUTH to nodes ---------------------------------------------------------------------------

def test_controller_and_status_authenticate_to_nodes(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=1, controller=False,
                 node_args=("--requirepass", "s3cret", "--masterauth", "s3cret"))
    r = c.nodes["s0n1"].client(password="s3cret")
    wait_until(lambda: r.info("replication").get("master_link_status") == "up", 20,
               what="the replica in sync")
    out = run_cli("status", "--etcd", c.url, "--cluster", c.name)
    assert out.returncode == 0 and "use --node-password" in out.stdout, out.stdout
    out = run_cli("status", "--etcd", c.url, "--cluster", c.name, "--node-password", "s3cret")
    assert out.returncode == 0 and "?" not in out.stdout.split("OFFSET")[1], out.stdout
    _controller(c, "--node-password", "s3cret")
    c.wait_for(lambda v: v.leader is not None, 10, "a leader")
    c.nodes["s0n0"].proc.kill()
    c.wait_for(lambda v: v.shards["0"].value.primary == "s0n1", 15, "failover with AUTH")
    assert "promoted s0n1" in c.controllers[-1].log_text()


def test_controller_and_status_log_in_as_their_own_acl_user(xcluster, tmp_path) -> None:  # noqa: ANN001
    """--node-user: the control plane logs in to the nodes as its own ACL user, whose password
    is not the default user's (AUTH user pass; without the user the same password fails)."""
    acl = tmp_path / "users.acl"
    acl.write_text("user default on >s3cret ~* &* +@all\nuser ctl on >cpw ~* &* +@all\n")
    c = xcluster(shards=1, replicas=1, controller=False,
                 node_args=("--aclfile", str(acl), "--masterauth", "s3cret"))
    r = c.nodes["s0n1"].client(password="s3cret")
    wait_until(lambda: r.info("replication").get("master_link_status") == "up", 20,
               what="the replica in sync")
    base = ("--etcd", c.url, "--cluster", c.name)
    out = run_cli("status", *base, "--node-password", "cpw")
    assert out.returncode == 0 and "use --node-password" in out.stdout, out.stdout
    assert r.execute_command("ACL", "LOG", "RESET") == b"OK"  # that refused login, logged
    out = run_cli("status", *base, "--node-user", "ctl", "--node-password", "cpw")
    assert out.returncode == 0 and "?" not in out.stdout.split("OFFSET")[1], out.stdout
    _controller(c, "--node-user", "ctl", "--node-password", "cpw")
    c.wait_for(lambda v: v.leader is not None, 10, "a leader")
    c.nodes["s0n0"].proc.kill()
    c.wait_for(lambda v: v.shards["0"].value.primary == "s0n1", 15, "failover as user ctl")
    assert "promoted s0n1" in c.controllers[-1].log_text()
    assert r.execute_command("ACL", "LOG") == []  # no login of the control plane was refused


def test_slot_moves_log_in_as_the_masteruser(xcluster, tmp_path) -> None:  # noqa: ANN001
    """With the default user off, a slot move's link to the target logs in as --masteruser
    (AUTH user pass): without the user, the same password is refused and the move never
    ends."""
    acl = tmp_path / "users.acl"
    acl.write_text("user default off\nuser mover on >mpw ~* &* +@all\n")
    c = xcluster(shards=2, replicas=0, node_args=("--aclfile", str(acl), "--masteruser",
                                                  "mover", "--masterauth", "mpw"))
    src = c.nodes[c.primary_id("0")].client(username="mover", password="mpw")
    owner = owners(c.view().slots.value)
    slot = max(s for s in range(16384) if owner[s] == "0")
    key = keys_in_slots([slot], per_slot=1)[0]
    src.xadd(key, {"f": "v"}, id="1-1")
    out = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1", "--slots",
                  str(slot), "--wait", "--timeout", "40", "--node-user", "mover",
                  "--node-password", "mpw")
    assert out.returncode == 0, out.stdout + out.stderr
    dst = c.nodes[c.primary_id("1")].client(username="mover", password="mpw")
    assert dst.xrange(key) == [(b"1-1", {b"f": b"v"})]
    refused = [e for e in dst.execute_command("ACL", "LOG") if b"auth" in e]
    assert refused == []  # no login was refused


# --- endpoint lists ----------------------------------------------------------------------------

def test_a_dead_endpoint_in_the_list_is_skipped(xcluster, etcd_url: str) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=0, controller=False)
    dead = f"http://127.0.0.1:{free_port()}"
    out = run_cli("status", "--etcd", f"{dead},{etcd_url}", "--cluster", c.name)
    assert out.returncode == 0 and "s0n0" in out.stdout, out.stderr
    out = run_cli("status", "--etcd", f"{dead},{dead}", "--cluster", c.name)
    assert out.returncode == 1 and "cannot reach etcd" in out.stderr


def test_the_store_and_a_lease_survive_the_loss_of_the_member_in_use(tmp_path, members) -> None:  # noqa: ANN001
    m = EtcdMembers(tmp_path / "etcd3", 3).start()
    members.append(m)

    async def go() -> None:
        s = Store(m.url, "multi")
        await s.connect()
        session = await LeaseSession.open(s)
        assert await s.create_cluster(["0"])
        assert await s.put_node(NodeRecord("n", "127.0.0.1", 1, "0"), session.id, 0)
        assert s.client._port == m.client_ports[0]  # talking to the first member
        os.kill(m.procs[0].pid, signal.SIGKILL)
        v = await s.view()  # moves to another member
        assert "n" in v.nodes and s.client._port != m.client_ports[0]
        # Keep-alives go on through the surviving members: after more than a TTL the key
        # is still on the same lease (nothing to wait for: the check is that nothing happens).
        await asyncio.sleep(POLICY.ttl + 1)
        assert session.alive and session.age() < POLICY.ttl / 2, session.age()
        v = await s.view()
        assert v.nodes["n"].lease == session.id
        await session.close()
        await s.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_a_node_keeps_its_lease_when_an_etcd_member_dies(tmp_path, members, xnode) -> None:  # noqa: ANN001
    m = EtcdMembers(tmp_path / "etcd3", 3).start()
    members.append(m)
    assert run_cli("create", "--etcd", m.url, "--cluster", "mc", "--shards", "1").returncode == 0
    h = xnode("--etcd", m.url, "--cluster", "mc", "--shard", "0", "--node-id", "a", name="a")
    cl = h.client()
    wait_until(lambda: "a" in read_view(m.urls[1], "mc").nodes and _writes(cl), 20,
               what="the node registered and writing")
    lease = read_view(m.urls[1], "mc").nodes["a"].lease
    m.procs[0].kill()
    t0 = time.monotonic()
    wait_until(lambda: _writes(cl) and time.monotonic() - t0 > POLICY.ttl + 1, 20,
               what="writes after a TTL")
    assert read_view(m.urls[1], "mc").nodes["a"].lease == lease  # never lost


def _writes(cl: redis.Redis) -> bool:
    try:
        cl.xadd("k", {"a": "1"})
        return True
    except redis.RedisError:
        return False


# --- etcd auth ---------------------------------------------------------------------------------

def test_etcd_user_and_password(tmp_path, members, xnode) -> None:  # noqa: ANN001
    m = EtcdMembers(tmp_path / "etcd-auth").start()
    members.append(m)
    for args in (("user", "add", "root", "--new-user-password", "rootpw"),
                 ("auth", "enable")):
        r = m.ctl(0, *args)
        assert r.returncode == 0, r.stderr
    base = ("--etcd", m.url, "--cluster", "au")
    r = run_cli("create", *base, "--shards", "1")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "etcd" in r.stderr, r.stderr
    r = run_cli("create", *base, "--shards", "1", "--etcd-user", "root", "--etcd-password",
                "wrong")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli("create", *base, "--shards", "1", "--etcd-user", "root", "--etcd-password",
                "rootpw")
    assert r.returncode == 0, r.stderr
    # A node takes the password from the environment (not argv, which ps shows).
    h = xnode(*base, "--shard", "0", "--node-id", "a", "--etcd-user", "root", name="a",
              env={"XSHARD_ETCD_PASSWORD": "rootpw"})
    wait_until(lambda: _writes(h.client()), 20, what="the node registered and writing")
    r = run_cli("status", *base, "--etcd-user", "root", "--etcd-password", "rootpw")
    assert r.returncode == 0 and "primary" in r.stdout, r.stderr


# --- TLS ---------------------------------------------------------------------------------------

def test_etcd_over_tls_with_client_certificates(tmp_path, members, xnode) -> None:  # noqa: ANN001
    tls = make_tls(tmp_path / "certs")
    m = EtcdMembers(tmp_path / "etcd-tls", tls=tls).start()
    members.append(m)
    assert m.url.startswith("https://")
    base = ("--etcd", m.url, "--cluster", "tl")
    certs = ("--etcd-cacert", str(tls.ca), "--etcd-cert", str(tls.client_cert),
             "--etcd-key", str(tls.client_key))
    r = run_cli("create", *base, "--shards", "1", "--etcd-cacert", str(tls.ca))
    assert r.returncode == 1 and "cannot reach etcd" in r.stderr, r.stderr  # no client cert
    r = run_cli("create", *base, "--shards", "1", *certs)
    assert r.returncode == 0, r.stderr
    h = xnode(*base, "--shard", "0", "--node-id", "a", *certs, name="a")
    wait_until(lambda: _writes(h.client()), 20, what="the node registered over TLS")
    r = run_cli("status", *base, *certs)
    assert r.returncode == 0 and "primary" in r.stdout, r.stderr
