"""Private networks of Linux network namespaces, for the partition tests and benchmark.

`Net()` makes one bridge in the root namespace (address 10.A.B.1/24, a subnet picked from the
pid, so parallel runs never share one) and `net.host(name)` one namespace per process (its own
address 10.A.B.k, a veth on the bridge, loopback up). A process runs in it with `host.wrap(argv)`
(`ip netns exec NS ...`) and binds the host's address; the test process, in the root
namespace, reaches every host through the bridge.

Faults are nftables rules inside a host's namespace (table `inet xs`, chains `in` and `out`),
so they cut exactly the pairs asked for and nothing else:
- `cut(a, b)` drops every packet between a and b, silently, as a partition does (TCP notices
  nothing; its retransmissions go nowhere) until `heal(a)`;
- `refuse(a, b)` answers b's new connections to a with a TCP reset (a firewall's REJECT);
- `loss(a, b, pct)` drops that share of the packets between them at random (nft `numgen`);
- `redirect(a, b, port, to_port)` sends a's connections to b:port to the bridge address
  `to_port` instead (a DNAT), where a test's TCP proxy can delay them;
- `heal(a)` removes a's faults (`redirects=True`: its redirects too).
The kernel here has no `netem` qdisc (CONFIG_NET_SCH_NETEM is off), so a fixed delay comes from
the proxy (tests/support/tcpproxy.py `delay=`) and random loss from nft.

`close()` deletes the namespaces (their veths go with them) and the bridge; the rules live in
the namespaces, so nothing is left behind. `available()` says why namespaces cannot be used
(not root, no `ip`/`nft`), for a skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["Host", "Net", "available"]

_nets = itertools.count()


def _run(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, input=stdin, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def available() -> str | None:
    """None when namespaces, veths and nftables work here, else the reason they do not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 nftables)"
    probe = f"xsprobe{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "xs")
    except (RuntimeError, OSError) as e:
        return f"cannot use network namespaces here: {e}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


_RULES = """
table inet xs {
  chain in { type filter hook input priority 0; policy accept; }
  chain out { type filter hook output priority 0; policy accept; }
}
table ip xsnat {
  chain out { type nat hook output priority -100; policy accept; }
}
"""


class Host:
    """One namespace with one address: where one process (node, etcd, ...) runs."""

    def __init__(self, net: Net, name: str, ns: str, ip: str) -> None:
        self.net = net
        self.name = name
        self.ns = ns
        self.ip = ip

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def nft(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.ns, "nft", *args)

    def __repr__(self) -> str:
        return f"<Host {self.name} {self.ip} ns={self.ns}>"


class Net:
    """A bridge and its namespaces; see the module docstring. Always `close()` it."""

    def __init__(self) -> None:
        n = (os.getpid() * 8 + next(_nets)) % 65536
        self.tag = f"xs{n}"
        self.prefix = f"10.{n >> 8}.{n & 255}"
        self.bridge = f"{self.tag}b"
        self.gateway = f"{self.prefix}.1"  # the root namespace's address (the test process)
        self.hosts: dict[str, Host] = {}
        _run("ip", "link", "del", self.bridge, check=False)  # left by a killed run of this pid
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        try:
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def host(self, name: str) -> Host:
        """A new namespace on the bridge, with the next address."""
        k = len(self.hosts) + 2
        ns = f"{self.tag}-{name}"
        outer, inner = f"{self.tag}v{k}", f"{self.tag}i{k}"
        ip = f"{self.prefix}.{k}"
        _run("ip", "netns", "del", ns, check=False)
        _run("ip", "netns", "add", ns)
        h = Host(self, name, ns, ip)
        self.hosts[name] = h
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        inside = ("ip", "netns", "exec", ns)
        _run(*inside, "ip", "addr", "add", f"{ip}/24", "dev", inner)
        _run(*inside, "ip", "link", "set", inner, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "nft", "-f", "-", stdin=_RULES)
        return h

    # --- faults ----------------------------------------------------------------------------------
    @staticmethod
    def _ip(b: Host | str) -> str:
        return b.ip if isinstance(b, Host) else b

    def cut(self, a: Host, *others: Host | str) -> None:
        """Drop every packet between `a` and each of `others` (hosts or addresses)."""
        for b in others:
            ip = self._ip(b)
            a.nft("add", "rule", "inet", "xs", "out", "ip", "daddr", ip, "drop")
            a.nft("add", "rule", "inet", "xs", "in", "ip", "saddr", ip, "drop")

    def refuse(self, a: Host, *others: Host | str) -> None:
        """`a` answers new TCP connections from `others` with a reset, as a firewall's
        REJECT does: to them a's ports look closed (ECONNREFUSED), a dead process's sign."""
        for b in others:
            a.nft("add", "rule", "inet", "xs", "in", "ip", "saddr", self._ip(b), "tcp",
                  "flags", "syn", "reject", "with", "tcp", "reset")

    def loss(self, a: Host, b: Host | str, percent: int) -> None:
        """Drop `percent` % of the packets between `a` and `b`, each way, at random."""
        ip = self._ip(b)
        for chain, field in (("out", "daddr"), ("in", "saddr")):
            a.nft("add", "rule", "inet", "xs", chain, "ip", field, ip, "numgen", "random",
                  "mod", "100", "<", str(percent), "drop")

    def redirect(self, a: Host, b: Host, port: int, to_port: int) -> None:
        """a's new connections to b:port go to this net's gateway (the root namespace) on
        `to_port` instead: where a proxy listens."""
        a.nft("add", "rule", "ip", "xsnat", "out", "ip", "daddr", b.ip, "tcp", "dport",
              str(port), "dnat", "to", f"{self.gateway}:{to_port}")

    def heal(self, *hosts: Host, redirects: bool = False) -> None:
        """Remove the cuts, refusals and losses of `hosts` (all hosts when none is given),
        and with `redirects` their redirects too."""
        for h in hosts or tuple(self.hosts.values()):
            h.nft("flush", "chain", "inet", "xs", "in")
            h.nft("flush", "chain", "inet", "xs", "out")
            if redirects:
                h.nft("flush", "chain", "ip", "xsnat", "out")

    def close(self) -> None:
        for h in self.hosts.values():
            _run("ip", "netns", "del", h.ns, check=False)
        self.hosts.clear()
        _run("ip", "link", "del", self.bridge, check=False)

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
