"""A small TCP proxy that tests put between two servers to cut and restore a link.

`TcpProxy(target_port).start()` listens on a free port and forwards every connection to the
target. `cut()` closes the live connections and refuses new ones (they are accepted and closed
at once, like a peer that resets) until `restore()`. `blackhole()` keeps connections open but
silently drops what flows either way: a partition that TCP does not notice. `delay=` holds
every chunk that long before passing it on (in order, each way): a slow link, where no
`netem` qdisc is available (tests/support/netns.py). Threads with blocking sockets are fine
here: this is test tooling, never part of a node.
"""

from __future__ import annotations

import queue
import socket
import threading
import time

from tests.support.procs import LOCALHOST, free_port

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = LOCALHOST,
                 listen_port: int | None = None, listen_host: str = LOCALHOST,
                 delay: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.host = listen_host
        self.port = listen_port or free_port()
        self.delay = delay
        self.mode = "pass"  # pass | cut | blackhole
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.accepted = 0

    # --- life cycle -----------------------------------------------------------------------------
    def start(self) -> TcpProxy:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.host, self.port))
        ls.listen(64)
        self._listener = ls
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"tcpproxy-{self.port}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        self._close_all()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- link control ---------------------------------------------------------------------------
    def cut(self) -> None:
        """Close every live connection and refuse new ones until restore()."""
        self.mode = "cut"
        self._close_all()

    def blackhole(self) -> None:
        """Keep connections open but drop every byte in both directions."""
        self.mode = "blackhole"

    def restore(self) -> None:
        self.mode = "pass"

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    # --- internals ------------------------------------------------------------------------------
    def _close_all(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for a, b in conns:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "cut":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, (client, upstream)),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        late: queue.Queue[tuple[float, bytes]] | None = None
        if self.delay > 0:
            late = queue.Queue()
            threading.Thread(target=self._deliver, args=(late, dst, pair), daemon=True).start()
        try:
            while True:
                data = src.recv(256 * 1024)
                if not data:
                    break
                if self.mode == "blackhole":
                    continue
                if self.mode == "cut":
                    break
                if late is not None:
                    late.put((time.monotonic() + self.delay, data))
                else:
                    dst.sendall(data)
        except OSError:
            pass
        if late is not None:
            late.put((0.0, b""))
            return  # _deliver closes the pair once the delayed bytes are out
        self._drop(pair)

    def _deliver(self, late: queue.Queue[tuple[float, bytes]], dst: socket.socket,
                 pair: tuple[socket.socket, socket.socket]) -> None:
        """Pass each chunk on once its delay is over; b"" ends the stream."""
        try:
            while True:
                due, data = late.get()
                if not data:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
                dst.sendall(data)
        except OSError:
            pass
        self._drop(pair)

    def _drop(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            if pair in self._conns:
                self._conns.remove(pair)
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
