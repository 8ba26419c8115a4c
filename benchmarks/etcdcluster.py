"""A throw-away cluster for the control-plane benchmarks: an etcd, `xshard create`, and the
`xshard` processes a benchmark starts (nodes, controllers, routers), each logging to a file
of its own; `stop()` ends them all and removes the directory."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from base.store import View, read_view
from control.etcd import EtcdProcess

REPO = Path(__file__).resolve().parent.parent
XSHARD = [sys.executable, "-m", "control.cli"]


class BenchCluster:
    def __init__(self, prefix: str, shards: int = 1, cluster: str = "bench") -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.etcd = EtcdProcess(self.tmp / "etcd")
        self.url = self.etcd.start()
        self.cluster = cluster
        self.procs: dict[str, subprocess.Popen] = {}
        self.xshard("create", "--shards", str(shards))

    def xshard(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run `xshard ARGV --etcd ... --cluster ...` to completion, output captured."""
        return subprocess.run([*XSHARD, *argv, "--etcd", self.url, "--cluster", self.cluster],
                              cwd=REPO, check=True, capture_output=True, text=True)

    def spawn(self, name: str, *argv: str, cpu: int | None = None) -> subprocess.Popen:
        """Start `xshard ARGV --etcd ... --cluster ...` in the background, logging to
        <tmp>/<name>.log; a process of the same name is replaced in the table. With `cpu`
        it runs pinned to that CPU (`taskset`, which execs it: the pid is the process's)."""
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        p = subprocess.Popen([*pin, *XSHARD, *argv, "--etcd", self.url, "--cluster", self.cluster],
                             cwd=REPO, stderr=subprocess.STDOUT,
                             stdout=open(self.tmp / f"{name}.log", "ab"))
        self.procs[name] = p
        return p

    def spawn_node(self, nid: str, port: int, shard: str = "0", *extra: str,
                   cpu: int | None = None) -> subprocess.Popen:
        d = self.tmp / nid
        d.mkdir(exist_ok=True)
        return self.spawn(nid, "node", "--port", str(port), "--dir", str(d), "--shard", shard,
                          "--node-id", nid, *extra, cpu=cpu)

    def view(self) -> View:
        return read_view(self.url, self.cluster)

    def stop(self) -> None:
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
        self.etcd.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
