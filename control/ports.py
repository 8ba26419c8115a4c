"""Picking a free TCP port: the one helper that `xshard up`, the tests and the benchmarks use.

Asking the kernel for port 0 hands out a port from the ephemeral range (32768-60999 on Linux).
Two things go wrong with those: redis-server in cluster mode refuses any port above 55535 (its
cluster bus listens on port + 10000), and the kernel also gives ephemeral ports to outgoing
connections, so a port that was free a moment ago is often taken by a client socket before
our server binds it. Ports are therefore drawn at random *below* the ephemeral range.

A port handed out is not handed out again by this process for a while: a caller often picks
several ports before starting anything on them (a node's plain and TLS ports), and two picks
that met would make the second server fail to bind however often it retried.
"""

from __future__ import annotations

import collections
import random
import socket
import threading

__all__ = ["free_port", "free_block", "port_in_use", "CLUSTER_MAX_PORT"]

CLUSTER_MAX_PORT = 55535  # redis-server --cluster-enabled yes refuses higher ports
_LOW = 20000
# The ports this process handed out most recently: not handed out again while they are here.
_recent: collections.deque[int] = collections.deque(maxlen=2048)
_recent_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _candidates() -> range:
    lo, hi = _ephemeral_range()
    if lo - _LOW >= 2000:
        return range(_LOW, lo)
    if CLUSTER_MAX_PORT - hi >= 2000:
        return range(hi + 1, CLUSTER_MAX_PORT + 1)
    return range(10000, min(lo, CLUSTER_MAX_PORT))


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on host:port (bind would fail)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port below the ephemeral range that was free a moment ago.

    Another process may still take it before ours binds; callers that start servers retry on
    a fresh port when the server reports the bind failure (tests/support/procs.py does).
    """
    ports = _candidates()
    rnd = random.SystemRandom()
    for _ in range(200):
        port = rnd.choice(ports)
        with _recent_lock:
            if port in _recent:
                continue
        if not port_in_use(port, host):
            return _handed_out(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded machine
        s.bind((host, 0))
        return s.getsockname()[1]


def free_block(n: int, host: str = "127.0.0.1") -> int:
    """The first of `n` consecutive ports below the ephemeral range that were all free a
    moment ago (`xshard up --port P` takes a block of ports)."""
    ports = _candidates()
    rnd = random.SystemRandom()
    for _ in range(200):
        base = rnd.choice(ports)
        if base + n - 1 > min(ports.stop - 1, CLUSTER_MAX_PORT):
            continue
        block = range(base, base + n)
        with _recent_lock:
            if any(p in _recent for p in block):
                continue
        if not any(port_in_use(p, host) for p in block):
            for p in block:
                _handed_out(p)
            return base
    raise RuntimeError(f"no block of {n} free ports")


def _handed_out(port: int) -> int:
    with _recent_lock:
        _recent.append(port)
    return port
