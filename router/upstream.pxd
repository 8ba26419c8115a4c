# Cython declarations for router/upstream.py (pure-Python mode; node/native.py, setup.py).
# Methods stay `def`: uvloop calls the protocol methods, the router the rest.

from router.outbox cimport Outbox

cdef class Upstream:
    cdef public object host, port, transport, waiting, buf, _scan, _on_close
    cdef public bint closed, _queued
    cdef public list _out
    cdef public Outbox _outbox
