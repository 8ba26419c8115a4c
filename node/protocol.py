"""The RESP server protocol that the node's and the router's client connections share.

Like aiohttp's BaseProtocol it owns what every RESP server connection needs, once:
- accepting the socket: TCP_NODELAY, `maxclients`, write-buffer water marks, a `Client`;
- parsing: a read that begins at a request boundary has its plain requests (`*N`, then N
  `$len` bulk strings) taken by a C loop over the bytes (RequestBuffer); hiredis frames the
  rest of such a read and every read that continues a request; inline commands and anything
  hiredis rejects go to the exact slow path (`node.resp.parse_request`), re-parsing the bytes
  since the last request boundary so that the reply and the error text are Redis's own;
- running: every complete command runs synchronously through `execute(client, argv)` and the
  replies of one batch leave in one write; a deep pipeline yields to the loop every 128
  commands;
- flow control: reading pauses while the transport's write buffer is over its high-water mark
  (pause_writing), while the client is blocked or the subclass stalls it (input waits in the
  kernel past 64 KiB), and resumes with the loop;
- protocol errors: Redis's `-ERR Protocol error: ...` reply, then close.

Hot-path choices (the node runs every command through `_process`):
- `execute` is the owner's bound method, looked up once per batch, so a command costs exactly
  one call here;
- `_halt` folds "closing", "write-paused" and "stalled" into one attribute checked per command;
- a batch's replies leave by `_flush_replies` (a C method compiled; it calls `_write`, and the
  node's connection overrides it), and `finish` is called once per batch, never per command;
- the per-read counters and the client are typed fields and locals: the fixed cost of a read
  (a router's pipelines bring a few requests per read) stays a few C field reads.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import cython
import hiredis

from node import errors
from node.resp import (
    PROTO_UNAUTH_BULK,
    PROTO_UNAUTH_MULTIBULK,
    SKIP,
    ProtocolError,
    check_request_header,
    collect_bulks,
    error,
    multibulk_header,
    parse_request,
)

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.cpython.list import PyList_New, PyList_SET_ITEM
    from cython.cimports.cpython.ref import Py_INCREF
    from cython.cimports.libc.string import memchr

if TYPE_CHECKING:
    from node.client import Client
    from node.cmdstats import CommandStats
    from node.context import ConnectionOwner

__all__ = ["RespConnection", "set_nodelay"]

_SPAN_LIMIT = 8 * 1024 * 1024  # past this, a request's raw bytes are not kept for error texts
_BLOCKED_INPUT_LIMIT = 64 * 1024  # a blocked client's input buffered before reading pauses
_MAX_COMMANDS_PER_TURN = 128  # commands of one client run before yielding to the loop
WRITE_HIGH = 256 * 1024  # transport water marks: replies to one batch are written at once;
WRITE_LOW = 64 * 1024  # past the high mark reading pauses instead of buffering without bound
# hiredis allocates all of an array's slots when it reads the `*N` line, before any element
# arrived: `*2147483647` costs 16 GB of address space and every full garbage collection then
# walks the 2^31 empty slots (25 s). A chunk with a count of 6 digits or more (found at C
# speed, ~1% of the parse) goes to the exact parser instead, which collects such a request's
# elements as they arrive (`_big`), as Redis does.
_BIG_COUNT = re.compile(rb"\*[0-9]{6}")
BIG_REQUEST = 100_000  # a request declaring more elements than this is collected by `_big`
# The request reader (`take_request`) takes counts of at most 5 digits (so under BIG_REQUEST and
# never a `_BIG_COUNT`) and lengths of at most 18 digits (no overflow).
_TAKE_COUNT = 99_999
# proto-max-bulk-len's floor (node/config.py): a read shorter than this holds no whole bulk
# string over the limit, so the request reader bounds lengths by the read's size instead of
# reading the setting (two attribute lookups) per read.
_MIN_BULK_LIMIT = 1024 * 1024


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """No Nagle on a TCP socket: every write is a whole batch of replies or requests, and
    Nagle would only add latency."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _big_count(data: bytes) -> bool:
    """`_BIG_COUNT.search(data)`, compiled a memchr scan for `*` (a pipeline of XADDs has two
    per command) instead of the regex engine stepping over every byte of every read."""
    if not cython.compiled or type(data) is not bytes:
        return _BIG_COUNT.search(data) is not None
    n = len(data)
    base = PyBytes_AS_STRING(data)
    i = 0
    while i < n:
        q = cython.cast(cython.p_char, memchr(base + i, 42, n - i))
        if q == cython.NULL:
            return False
        i = q - base + 1
        if i + 6 <= n:
            j = 0
            while j < 6 and 48 <= base[i + j] <= 57:
                j += 1
            if j == 6:
                return True
    return False


def _starts_request(data: bytes) -> bool:
    """`data[:1] == b"*"` without making the slice."""
    if cython.compiled and type(data) is bytes:
        return len(data) > 0 and PyBytes_AS_STRING(data)[0] == 42
    return data[:1] == b"*"


def _tail(parts: list[bytes]) -> bytes:
    """The last 8 bytes of `parts` joined: a `*N` line may come in pieces of any size."""
    t = parts[-1][-8:]
    i = len(parts) - 1
    while len(t) < 8 and i > 0:
        i -= 1
        t = parts[i][-8:] + t
    return t


def _all_bulk(argv: list) -> bool:
    """Every element of a request is a bulk string (hiredis gives nested arrays and integers
    as such): what Redis accepts; anything else goes to the exact parser for its error."""
    for a in argv:
        if type(a) is not bytes:
            return False
    return True


class RequestBuffer:
    """Received bytes at a request boundary, read one plain request at a time by a C loop.

    What nearly every client sends is `*N` then N bulk strings: this takes such a request
    straight from the bytes, one `bytes` object per argument and nothing else (hiredis copies
    the read into its own buffer and builds the same objects through a callback per element
    and a state machine). Anything else (an incomplete request, an inline command, a non-`$`
    element, a number not in Redis's strict form, a count or a length over the limits) is left
    where it starts, for the hiredis and exact paths that know every case and Redis's errors.
    """

    __slots__ = ("buf", "pos", "end")

    def __init__(self) -> None:
        self.buf: bytes | None = None  # the bytes not read yet start at `pos`; None: nothing
        self.pos = 0
        self.end = 0  # where the line `_number` read ends

    def take(self, max_count: int, max_len: int) -> list[bytes] | None:
        """The request at `pos`, advancing past it, if it is complete, plain (`*N` and `$len`
        lines with CRLF, strict numbers), declares 1..max_count elements and no length over
        `max_len`; else None and `pos` stays."""
        buf = self.buf
        if buf is None:
            return None
        size = len(buf)
        i = self.pos
        if cython.compiled:
            base = cython.cast(cython.p_uchar, PyBytes_AS_STRING(buf))
        else:
            base = buf
        if i >= size or base[i] != 42:  # '*'
            return None
        count = self._number(base, i + 1, size, 5)
        if count < 1 or count > max_count:
            return None
        i = self.end
        # The list at its size at once (no growth by appends); a slot not filled when the
        # request turns out odd is NULL, which freeing the list allows.
        argv: list[bytes] = PyList_New(count) if cython.compiled else [b""] * count
        k = 0
        while k < count:
            if i >= size or base[i] != 36:  # '$'
                return None
            ln = self._number(base, i + 1, size, 18)
            if ln < 0 or ln > max_len:
                return None
            i = self.end
            if i + ln + 2 > size or base[i + ln] != 13 or base[i + ln + 1] != 10:
                return None
            if cython.compiled:
                arg = PyBytes_FromStringAndSize(cython.cast(cython.p_char, base) + i, ln)
                Py_INCREF(arg)  # the list steals a reference
                PyList_SET_ITEM(argv, k, arg)
            else:
                argv[k] = buf[i:i + ln]
            i += ln + 2
            k += 1
        self.pos = i
        return argv

    def _number(self, base: bytes, i: int, size: int, digits: int) -> int:
        """The number of the header line at `i` (Redis's strict form: digits, no sign, no
        leading zero; at most `digits` of them) if its CRLF arrived, `end` set past it;
        else -1."""
        start = i
        v = 0
        while i < size and 48 <= base[i] <= 57:
            v = v * 10 + (base[i] - 48)
            i += 1
            if i - start > digits:
                return -1
        if i == start or (base[start] == 48 and i - start > 1):
            return -1
        if i + 1 >= size or base[i] != 13 or base[i + 1] != 10:
            return -1
        self.end = i + 2
        return v


class RespConnection:
    """One client socket of a RESP server. Parses synchronously, replies once per batch.

    An asyncio protocol by its methods, not by inheritance: compiled (node/protocol.pxd) it
    is an extension type, which cannot derive from asyncio.Protocol. `as_protocol` gives the
    loop's factories their type."""

    __slots__ = ("server", "execute", "transport", "reader", "client", "_slow", "_boundary",
                 "_span", "_span_len", "_done", "_closing", "_write_paused", "_read_paused",
                 "_stalls", "_halt", "_pending", "_big", "_requests", "_own_process", "raw",
                 "keep_spans", "_stats")

    def __init__(self, server: ConnectionOwner,
                 execute: Callable[[Client, list[bytes]], bytes | None],
                 keep_spans: bool = False) -> None:
        self.server = server
        # Runs one command: its reply, or None when the reply comes later (a blocked client
        # on the node, every request on the router).
        self.execute = execute
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        self.client: Client | None = None
        self._slow = b""  # bytes for the exact (slow) parser: inline commands, odd input
        self._boundary = True  # hiredis holds nothing: the next byte starts a request
        self._span: list[bytes] | None = []  # bytes fed to hiredis since the last boundary
        self._span_len = 0
        self._done = 0  # commands of the span that already ran
        self._closing = False
        self._write_paused = False
        self._read_paused = False
        self._stalls = 0  # stall() without resume(): later requests wait (router)
        self._halt = False  # closing or write-paused or stalled: run no command now
        self._pending = 0  # bytes received into an incomplete request
        self._big: tuple[int, list[bytes]] | None = None  # a huge request's count and elements
        # A read that began at a request boundary with `*`: its plain requests are taken by a
        # C loop (RequestBuffer), the rest of it goes to hiredis. Bytes wait here (and nothing
        # is in hiredis) while the client cannot run them: blocked, stalled, or a deep pipeline
        # yielding to the loop.
        self._requests = RequestBuffer()
        # This class's `_process` runs (no subclass override): the read path calls its body.
        self._own_process = type(self)._process is RespConnection._process
        # The bytes of the request being executed when one read held exactly it, or (with
        # keep_spans) when the request reader took it from a read, else None (set before every
        # execute): the router relays those instead of encoding the request again
        # (router/client.py).
        self.raw: bytes | None = None
        self.keep_spans = keep_spans  # raw also for each request of a pipeline (the router)
        # The owner's counters (never replaced), read per read as C fields compiled.
        self._stats: CommandStats | None = server.stats if server is not None else None

    # --- asyncio callbacks --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        owner = self.server
        if len(owner.clients) >= owner.config.maxclients:
            owner.stats.rejected_connections += 1
            transport.write(error(errors.MAX_CLIENTS))  # type: ignore[attr-defined]
            transport.close()
            self._closing = self._halt = True
            return
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)  # type: ignore[attr-defined]
        self.client = owner.add_client(self, f"{peer[0]}:{peer[1]}", f"{local[0]}:{local[1]}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = self._halt = True
        if self.client is not None:
            self.server.remove_client(self.client)

    def as_protocol(self) -> asyncio.Protocol:
        """This connection, typed as what loop.create_server's factory returns."""
        return self  # type: ignore[return-value]

    def eof_received(self) -> bool | None:
        """The peer shut its side: close ours too (asyncio.Protocol's default)."""
        return None

    def pause_writing(self) -> None:
        self._write_paused = self._halt = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._halt = self._closing or bool(self._stalls)
        if self.client is not None and self.client.blocked is None and not self._halt:
            self._resume_reading()
            self._process()

    def data_received(self, data: bytes) -> None:
        """Requests arrive: run what is complete (cpdef compiled: the router's connection
        wraps it, router/client.py, and calls it as C)."""
        if self._closing:
            return
        if self._stats is not None:
            self._stats.net_input_bytes += len(data)
        requests = self._requests
        waiting = requests.buf
        if waiting is not None:  # the client could not run them yet: the new bytes go after
            requests.buf = waiting[requests.pos:] + data
            requests.pos = 0
            self._after_requests()
            return
        if self._boundary and not self._slow and self._big is None and _starts_request(data):
            requests.buf = data
            requests.pos = 0
            self._boundary = False
            self._after_requests()
            return
        reader = self.reader
        if self._slow or self._big is not None or (data[:1] != b"*" and self._boundary):
            self._slow += data
            self._process()
            return
        # Keep the bytes since the last known request boundary: if hiredis rejects something,
        # the slow path re-parses them exactly as Redis would.
        span = self._span
        if (self._boundary or span) and (_big_count(data) or (
                span and not self._boundary and _BIG_COUNT.search(_tail(span) + data[:8]))):
            self._huge_count(data)  # (past _SPAN_LIMIT without a boundary it cannot re-parse)
            return
        if self._boundary:
            self._span = [data]
            self._span_len = len(data)
            self._done = 0
        elif span is not None:
            span.append(data)
            self._span_len += len(data)
            if self._span_len > _SPAN_LIMIT:
                self._span = None
        reader.feed(data)
        if self._process():
            self._pending = len(data)
            return
        self._pending += len(data)
        self._wait_for_more()

    def _after_requests(self) -> None:
        """Run a read that began at a request boundary (`_requests`), then see to what is left
        of it, as `data_received` does for bytes fed to hiredis."""
        if self._own_process:
            self._run()
            self._after_run()
        else:
            self._process()
        requests = self._requests
        if requests.buf is not None:  # whole requests the client cannot run now
            self._pending = len(requests.buf) - requests.pos
            c = self.client
            if c is not None and (c.blocked is not None or self._stalls) \
                    and self._pending > _BLOCKED_INPUT_LIMIT:
                self._pause_reading()
            return
        if self._boundary or self._closing or self._slow or self._big is not None:
            self._pending = 0
            return
        else:  # hiredis holds the start of a request: the rest of the read from its boundary
            self._pending = self._span_len
        self._wait_for_more()

    def _wait_for_more(self) -> None:
        """Part of a request arrived, or the client cannot run what did: pause a waiting
        client's input, refuse a request that declares what Redis refuses before it is
        whole, and the query-buffer limit."""
        c = self.client
        if c is not None and (c.blocked is not None or self._stalls):
            if self._pending > _BLOCKED_INPUT_LIMIT:
                self._pause_reading()  # a waiting client's pipeline waits in the kernel
            return
        span = self._span
        err = None
        if span is not None and len(span) == 1 and not self._done:
            # Nothing ran from the first chunk after a boundary: the request at its start may
            # declare an impossible length that hiredis would wait for forever.
            err = check_request_header(span[0], self.server.config.proto_max_bulk_len,
                                       c is not None and c.authenticated)
        if err is None and self._pending > self.server.config.client_query_buffer_limit:
            err = b"query buffer limit exceeded"
            self.server.stats.qbuf_disconnections += 1
        if err is not None:
            self._write(self._protocol_error_reply(err))
            self.finish()

    # --- running commands ---------------------------------------------------------------------
    def _process(self) -> int:
        """Run every complete command that is ready, then write the replies at once.

        Returns how many commands ran."""
        n = self._run()
        self._after_run()
        return n

    def _after_run(self) -> None:
        """After the commands that were ready ran: nothing here; the router's connection
        writes a request for an idle node at once (router/client.py). C, not an override of
        `_process`, which the read path would call by name."""

    def _run(self) -> int:
        """`_process` itself: called directly (as C) where a subclass does not override
        `_process` (the node's connections and the router's)."""
        c = self.client
        if c is None or self._closing:
            return 0
        out: list[bytes] = []
        if self._slow:
            self._process_slow(out)
            n = self._run_reader(c, out, 0)
        elif self._requests.buf is None:
            n = self._run_reader(c, out, 0)
        else:
            n = self._run_requests(c, out)
            # Unless every request of the read ran, or the client cannot run more now, the
            # rest of the read went to hiredis.
            if self._requests.buf is None and not self._boundary:
                n = self._run_reader(c, out, n)
        if out:
            self._flush_replies(out[0] if len(out) == 1 else b"".join(out))
        if c.close_after_reply:
            self.finish()
        return n

    def _run_reader(self, c: Client, out: list[bytes], n: int) -> int:
        """Run the commands hiredis has whole while the client can, after the `n` that ran
        already in this turn; returns how many have run in all."""
        execute = self.execute
        reader = self.reader
        # True when the end of the previous turn already found data: nothing between there and
        # the top of the loop reads the reader, so one has_data() call per command suffices.
        ready = False
        while not self._slow and c.blocked is None and not self._halt:
            if not ready and not reader.has_data():
                break
            ready = False
            try:
                argv = reader.gets()
            except hiredis.ProtocolError:
                self._fallback(out)
                break
            if argv is False:
                self._boundary = False
                break
            n += 1
            if type(argv) is not list:
                self._fallback(out)
                break
            if not argv:
                continue
            if not _all_bulk(argv):
                self._fallback(out)
                break
            self._done += 1
            if n == 1 and self._done == 1 and not reader.has_data():
                span = self._span
                self.raw = span[0] if span is not None and len(span) == 1 else None
            else:
                self.raw = None
            reply = execute(c, argv)
            if reply is not None:
                out.append(reply)
            if c.close_after_reply:
                break
            if not reader.has_data():
                self._boundary = True
                break
            ready = True
            if n >= _MAX_COMMANDS_PER_TURN:
                # A deep pipeline must not hold the loop: let other clients (and timers) run,
                # and continue from where we stopped on the next loop iteration.
                self._boundary = False
                self._pause_reading()
                self.server.loop.call_soon(self._continue)
                break
        return n

    def _run_requests(self, c: Client, out: list[bytes]) -> int:
        """Run the plain requests at the front of `_requests` while the client can; at the
        first thing RequestBuffer does not take, the rest goes to hiredis (or the exact
        parser) as a read that begins at a request boundary. Returns how many ran."""
        requests = self._requests
        buf = requests.buf
        assert buf is not None
        size = len(buf)
        # Under the setting's floor the read's size bounds every length it can hold whole (a
        # longer declared length is incomplete either way and goes on to hiredis).
        max_bulk = size if size < _MIN_BULK_LIMIT else self.server.config.proto_max_bulk_len
        execute = self.execute
        n = 0
        turn = _MAX_COMMANDS_PER_TURN
        most = _TAKE_COUNT
        while True:
            pos = requests.pos
            if pos >= size:
                requests.buf = None
                self._boundary = True
                break
            if c.blocked is not None or self._halt or c.close_after_reply:
                break
            if n >= turn:
                self._pause_reading()
                self.server.loop.call_soon(self._continue)
                break
            if c.authenticated:
                argv = requests.take(most, max_bulk)
            else:
                argv = requests.take(PROTO_UNAUTH_MULTIBULK, min(max_bulk, PROTO_UNAUTH_BULK))
            if argv is None:
                requests.buf = None
                self._hand_over(buf[pos:] if pos else buf, out)
                break
            n += 1
            # The router relays a read that held exactly this request as it came, and with
            # keep_spans each request of a pipeline as its own bytes.
            end = requests.pos
            if pos == 0 and end == size:
                self.raw = buf
            else:
                self.raw = buf[pos:end] if self.keep_spans else None
            reply = execute(c, argv)
            if reply is not None:
                out.append(reply)
        return n

    def _hand_over(self, data: bytes, out: list[bytes]) -> None:
        """`data` begins at a request boundary and RequestBuffer does not take its first
        request: hiredis, or the exact parser for a count hiredis must not see, as for a
        fresh read (`data_received`)."""
        self._span = [data]
        self._span_len = len(data)
        self._done = 0
        self._boundary = False
        if _big_count(data):
            self._fallback(out)
        else:
            self.reader.feed(data)

    def _huge_count(self, data: bytes) -> None:
        """A chunk declares a count hiredis must not see: the exact parser takes the bytes since
        the last boundary (the commands of them that already ran are skipped)."""
        if self._boundary:
            self._span = []
            self._span_len = 0
            self._done = 0
        if self._span is not None:
            self._span.append(data)
            self._span_len += len(data)
        out: list[bytes] = []
        self._fallback(out)
        if out:
            self._write(b"".join(out))
        if self.client is not None and self.client.close_after_reply:
            self.finish()

    def _continue(self) -> None:
        if not self._write_paused:
            self._resume_reading()
        self._process()

    def _fallback(self, out: list[bytes]) -> None:
        """hiredis rejected the input: hand the bytes since the last boundary to the slow path."""
        self.reader = hiredis.Reader()
        span = self._span
        if span is None:  # too much to keep: an approximate error is the best we can do
            out.append(self._protocol_error_reply(b"invalid multibulk length"))
            return
        self._slow = b"".join(span)
        self._span = None
        self._boundary = False
        skip = self._done
        self._done = 0
        self._process_slow(out, skip)

    def _process_slow(self, out: list[bytes], skip: int = 0) -> None:
        """The exact Redis parser, for inline commands and input hiredis rejects; `skip`
        commands at the front already ran from hiredis."""
        c = self.client
        assert c is not None
        buf = self._slow
        pos = 0
        max_bulk = self.server.config.proto_max_bulk_len
        argv: list[bytes] | None
        while c.blocked is None and not c.close_after_reply and not self._halt:
            try:
                if self._big is not None:
                    count, got = self._big
                    argv = got
                    pos = collect_bulks(buf, pos, count, got, max_bulk, c.authenticated)
                    if len(got) < count:
                        break
                    self._big = None
                    end = pos
                else:
                    argv, end = parse_request(buf, pos, max_bulk, c.authenticated)
                    if argv is None and buf[pos:pos + 1] == b"*":
                        head = multibulk_header(buf, pos, c.authenticated)
                        if head is not None and head[0] > BIG_REQUEST:
                            # Collect it from here on: re-parsing it on every read would be
                            # quadratic in its size.
                            self._big = (head[0], [])
                            pos = head[1]
                            continue
            except ProtocolError as e:
                self._big = None
                out.append(self._protocol_error_reply(e.text))
                pos = len(buf)
                break
            if argv is None:
                break
            pos = end
            if argv is SKIP:
                continue
            if skip:
                skip -= 1
                continue
            self.raw = None
            reply = self.execute(c, argv)
            if reply is not None:
                out.append(reply)
        rest = buf[pos:]
        if self._big is None and (not rest or rest[:1] == b"*" and _BIG_COUNT.search(rest) is None):
            # Back to hiredis at a request boundary.
            self._slow = b""
            self._boundary = True
            if rest:
                self._feed_fast(rest)
        else:
            self._slow = rest

    def _feed_fast(self, data: bytes) -> None:
        self._span = [data]
        self._span_len = len(data)
        self._done = 0
        self._boundary = False
        self.reader.feed(data)

    def _protocol_error_reply(self, err: bytes) -> bytes:
        """Redis replies to a protocol error and then closes the connection."""
        msg = errors.protocol_error(err)
        self.server.stats.error(msg)
        if self.client is not None:
            self.client.close_after_reply = True
        return error(msg)

    # --- waiting: the client's later requests wait while one is in progress (router) ---------
    def stall(self) -> None:
        self._stalls += 1
        self._halt = True

    def resume(self) -> None:
        """End one stall; with none left, the requests that waited run on the next turn."""
        self._stalls -= 1
        if self._stalls or self._closing:
            return
        self._halt = self._write_paused
        if not self._halt:
            self._resume_reading()
            # Usually nothing came meanwhile (a consumer waits for its read): then no callback.
            if self._slow or self._requests.buf is not None or self.reader.has_data():
                self.server.loop.call_soon(self._process)

    # --- output and closing -------------------------------------------------------------------
    def _flush_replies(self, data: bytes) -> None:
        """The replies of one batch leave: `_write`, or the node's C override of this."""
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Send the replies of one batch (subclasses add reply ordering or fsync gating)."""
        t = self.transport
        if t is not None and not self._closing:
            t.write(data)

    def send_monitor(self, data: bytes) -> None:
        """A MONITOR line (node/monitor.py): straight to the socket, outside any reply order
        or fsync gate, as Redis writes to its monitors."""
        t = self.transport
        if t is not None and not self._closing:
            self.server.stats.net_output_bytes += len(data)
            t.write(data)

    def finish(self) -> None:
        """Close once the replies already written have left (QUIT, a protocol error)."""
        self.close()

    def on_unblocked(self, reply: bytes) -> None:
        """The blocking manager released this connection's client with `reply`."""
        raise NotImplementedError

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None and not self._closing:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and self.transport is not None and not self._closing:
            self._read_paused = False
            self.transport.resume_reading()

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self, force: bool = False) -> None:
        if self._closing or self.transport is None:
            return
        self._closing = self._halt = True
        if force:
            self.transport.abort()
        else:
            self.transport.close()
