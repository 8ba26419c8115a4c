"""TLS on memory buffers over a plain transport: the listeners (node/tls.py listen) and the
outgoing links (`connect`: a replica to its primary, a router to its nodes).

uvloop's and asyncio's own TLS protocols read each record with `SSLObject.read(256 KiB)`:
Python allocates a 256 KiB bytes object per read (mmap, then mremap to shrink it, munmap when
freed) and a second read per batch raises SSLWantReadError to find the buffer empty. At
pipeline 1 that was most of what TLS cost per request. Here every read asks for what the
received ciphertext can hold at most, stops when nothing is left without raising, and hands
the protocol one `data_received` per socket read, as a plain transport does.

The protocol above sees an ordinary transport once the handshake is done: write, close,
abort, pause/resume reading, write-buffer limits (those of the socket underneath),
set_protocol (replication takes a client's connection over), and get_extra_info with
`ssl_object`, `peercert`, `cipher` and `sslcontext` besides the socket's own keys.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["HANDSHAKE_TIMEOUT", "TlsLayer", "connect"]

HANDSHAKE_TIMEOUT = 60.0  # seconds, asyncio's default for a server-side handshake
READ_MAX = 256 * 1024  # plaintext per read call (a record is at most 16 KiB)
log = logging.getLogger("xshard.tls")


class TlsLayer(asyncio.Protocol):
    """The protocol of the plain socket: it runs the handshake, then decrypts what arrives
    for `app` (made by `factory` once the handshake succeeded) and encrypts what it writes."""

    def __init__(self, ctx: ssl.SSLContext, factory: Callable[[], Any],
                 loop: asyncio.AbstractEventLoop, *, server_side: bool = True,
                 server_hostname: str | None = None,
                 waiter: asyncio.Future[None] | None = None) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = ctx.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                 server_hostname=server_hostname)
        self._waiter = waiter  # connect(): told how the handshake ended
        self._factory = factory
        self._loop = loop
        self._raw: asyncio.Transport | None = None
        self._transport = TlsTransport(self)
        self.app: Any = None  # the protocol above, once the handshake is done
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False

    # --- the plain socket's callbacks ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]
        self._timer = self._loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_timeout)
        if not self._ssl.server_side:
            self._handshake()  # a client speaks first

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        if self.app is None:
            self._handshake()
        else:
            self._decrypt()

    def eof_received(self) -> bool | None:
        self._incoming.write_eof()
        if self.app is not None:
            return self.app.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        app, self.app = self.app, None
        if app is not None:
            app.connection_lost(exc)
        else:
            self._told(exc or ConnectionResetError("connection lost during the TLS handshake"))

    def pause_writing(self) -> None:
        if self.app is not None:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.app is not None:
            self.app.resume_writing()

    # --- TLS ----------------------------------------------------------------------------------
    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._send_records()
            return
        except (ssl.SSLError, OSError) as e:  # a bad or missing certificate, not TLS at all
            log.debug("TLS handshake failed: %s", e)
            self._send_records()
            self._close_raw()
            self._told(e)
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._send_records()
        self.app = self._factory()
        self.app.connection_made(self._transport)
        self._told(None)
        if self._incoming.pending and self.app is not None:
            self._decrypt()  # the first request came with the handshake's last flight

    def _told(self, exc: BaseException | None) -> None:
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            if exc is None:
                w.set_result(None)
            else:
                w.set_exception(exc)

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.app is None and self._raw is not None:
            self._raw.abort()

    def _decrypt(self) -> None:
        """Decrypt all complete records received; one data_received for all of them."""
        incoming, sslobj = self._incoming, self._ssl
        out = []
        eof = False
        try:
            while True:
                # plaintext is never longer than the ciphertext it came in
                want = incoming.pending + sslobj.pending()
                if not want:
                    break
                data = sslobj.read(want if want < READ_MAX else READ_MAX)
                if not data:
                    eof = True  # close_notify
                    break
                out.append(data)
        except ssl.SSLWantReadError:
            pass  # the rest of a record has not arrived yet
        except ssl.SSLError as e:
            log.debug("TLS read failed: %s", e)
            self._abort(e)
            return
        if self._outgoing.pending:
            self._send_records()  # post-handshake messages (session tickets, key updates)
        if out and self.app is not None:
            self.app.data_received(out[0] if len(out) == 1 else b"".join(out))
        if eof and self.app is not None and not self._closing:
            if not self.app.eof_received():
                self.close()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._raw is None:
            return
        sslobj = self._ssl
        try:
            n = sslobj.write(data)
            if n < len(data):
                view = memoryview(data)[n:]
                while view:
                    view = view[sslobj.write(view):]
        except ssl.SSLError as e:
            self._abort(e)
            return
        self._raw.write(self._outgoing.read())

    def _send_records(self) -> None:
        """Write the TLS records the SSL object produced (handshake, alerts, close_notify)."""
        if self._outgoing.pending and self._raw is not None:
            self._raw.write(self._outgoing.read())

    def close(self) -> None:
        """close_notify, then the socket closes once what was written has left."""
        if self._closing or self._raw is None:
            return
        self._closing = True
        try:
            self._ssl.unwrap()
        except (ssl.SSLError, ValueError):
            pass  # the peer's close_notify is not awaited (as Redis does)
        self._send_records()
        self._raw.close()

    def _abort(self, exc: Exception | None = None) -> None:
        """Drop the connection (a TLS error, or the protocol's abort); the protocol above hears
        it in connection_lost."""
        self._closing = True
        if self._raw is not None:
            self._raw.abort()

    def _close_raw(self) -> None:
        self._closing = True
        if self._raw is not None:
            self._raw.close()


class TlsTransport(asyncio.Transport):
    """What the protocol above writes to: the layer's encryption over the plain socket."""

    def __init__(self, layer: TlsLayer) -> None:
        super().__init__()
        self._layer = layer

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._layer.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._layer.write(b"".join(list_of_data))

    def close(self) -> None:
        self._layer.close()

    def abort(self) -> None:
        self._layer._abort()

    def is_closing(self) -> bool:
        return self._layer._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        layer = self._layer
        if name == "ssl_object":
            return layer._ssl
        if name == "peercert":
            return layer._ssl.getpeercert()
        if name == "cipher":
            return layer._ssl.cipher()
        if name == "sslcontext":
            return layer._ssl.context
        raw = layer._raw
        return raw.get_extra_info(name, default) if raw is not None else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._layer.app = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._layer.app  # type: ignore[no-any-return]

    def pause_reading(self) -> None:
        if self._layer._raw is not None:
            self._layer._raw.pause_reading()

    def resume_reading(self) -> None:
        if self._layer._raw is not None:
            self._layer._raw.resume_reading()

    def is_reading(self) -> bool:
        raw = self._layer._raw
        return raw is not None and raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._layer._raw is not None:
            self._layer._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        raw = self._layer._raw
        return raw.get_write_buffer_size() if raw is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        raw = self._layer._raw
        return raw.get_write_buffer_limits() if raw is not None else (0, 0)


async def connect(loop: asyncio.AbstractEventLoop, factory: Callable[[], Any], host: str,
                  port: int, ctx: ssl.SSLContext | None) -> None:
    """loop.create_connection(factory, host, port, ssl=ctx) for the outgoing links (a replica
    to its primary, a router to its nodes), with the TLS of this module: returns once the
    protocol's connection_made ran; raises OSError (ssl.SSLError for a refused handshake)."""
    if ctx is None:
        await loop.create_connection(factory, host, port)
        return
    waiter: asyncio.Future[None] = loop.create_future()
    raw, _ = await loop.create_connection(
        lambda: TlsLayer(ctx, factory, loop, server_side=False, server_hostname=host,
                         waiter=waiter), host, port)
    try:
        await waiter
    except BaseException:  # refused, or cancelled by the caller's timeout
        raw.abort()
        raise
