# Cython declarations for router/upstream.py (pure-Python mode; node/native.py, setup.py).
# Methods stay `def` where uvloop calls them (the protocol methods); `send` and `Pool.get`
# run per relayed request and are called as C by router/forward.py, `_relay` per read, and a
# `Waiter`'s `reply` per reply.

cimport cython

from node.resp cimport reply_scan
from router.outbox cimport Outbox, Writer

cdef object _cut(object data, Py_ssize_t start, Py_ssize_t end)

cdef class Waiter:
    cpdef reply(self, bytes r)

cdef class Upstream(Writer):
    cdef public object host, port, transport, waiting, buf, _scan, _on_close, _push, _pop
    cdef public bint closed, _queued
    cdef public list _out
    cdef public Outbox _outbox

    cpdef send(self, object data, object cb)
    @cython.locals(w=Waiter, start=Py_ssize_t, n=Py_ssize_t, pos=Py_ssize_t, need=Py_ssize_t)
    cpdef _relay(self, object data)
    @cython.locals(out=list)
    cpdef flush(self)

cdef class Pool:
    cdef public object loop, ssl, outbox, host, port, setup, dedicated, idle, addr
    cdef public Py_ssize_t size
    cdef public list conns

    @cython.locals(i=Py_ssize_t, c=Upstream)
    cpdef Upstream get(self, Py_ssize_t client_id)
    @cython.locals(c=Upstream)
    cpdef Upstream get_dedicated(self)
    cpdef release(self, Upstream c)
