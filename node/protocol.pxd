# Cython declarations for node/protocol.py (pure-Python mode; node/native.py, setup.py).
# Methods stay `def` so that the node's and the router's subclasses override them as before.

cimport cython

from node.client cimport Client
from node.cmdstats cimport CommandStats

@cython.final
cdef class RequestBuffer:
    cdef public bytes buf
    cdef public Py_ssize_t pos, end

    @cython.locals(size=Py_ssize_t, i=Py_ssize_t, count=Py_ssize_t, ln=Py_ssize_t,
                   k=Py_ssize_t, base="const unsigned char *", argv=list)
    cpdef list take(self, Py_ssize_t max_count, Py_ssize_t max_len)
    @cython.locals(start=Py_ssize_t, v=Py_ssize_t)
    cdef inline Py_ssize_t _number(self, const unsigned char *base, Py_ssize_t i, Py_ssize_t size,
                                   Py_ssize_t digits) noexcept

cdef class RespConnection:
    cdef public object server, execute, transport, reader, _span
    cdef public Client client
    cdef public bytes _slow
    cdef public bint _boundary, _closing, _write_paused, _read_paused, _halt, _own_process
    cdef public Py_ssize_t _span_len, _done, _stalls, _pending
    cdef public object _big, raw
    cdef public bint keep_spans
    cdef public RequestBuffer _requests
    cdef public CommandStats _stats
    cdef dict __dict__

    @cython.locals(requests=RequestBuffer, buf=bytes, size=Py_ssize_t, pos=Py_ssize_t,
                   max_bulk=Py_ssize_t, n=Py_ssize_t, turn=Py_ssize_t, most=Py_ssize_t,
                   argv=list, end=Py_ssize_t)
    cdef Py_ssize_t _run_requests(self, Client c, list out) except -1
    @cython.locals(c=Client, out=list, n=Py_ssize_t)
    cdef Py_ssize_t _run(self) except -1
    @cython.locals(ready=bint)
    cdef Py_ssize_t _run_reader(self, Client c, list out, Py_ssize_t n) except -1
    # uvloop calls it through Python (no override lookup: the wrapper skips it); the router's
    # connection, which wraps it, calls it as C (`RespConnection.data_received(self, data)`).
    @cython.locals(requests=RequestBuffer)
    cpdef void data_received(self, object data) except *
    @cython.locals(requests=RequestBuffer, c=Client)
    cdef void _after_requests(self) except *
    @cython.locals(c=Client)
    cdef void _wait_for_more(self) except *
    # A batch of replies on its way out: `_write` here; the node's Connection overrides it as
    # C (node/server.pxd). Not cpdef: Cython gives every instance a `__dict__` of its own, so
    # a cpdef call would look itself up by name on each call from another connection.
    cdef _flush_replies(self, data)
    cdef _after_run(self)

cdef bint _starts_request(object data) except -1

cpdef bint _all_bulk(list argv)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, base="char *", q="char *")
cdef bint _big_count(object data) except -1
