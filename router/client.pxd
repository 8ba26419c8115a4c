# Cython declarations for router/client.py (pure-Python mode; node/native.py, setup.py).

from node.client cimport Client
from node.protocol cimport RespConnection
from router.outbox cimport Outbox

cdef class RouterClient(Client):
    cdef public object written, txn_slot, watch_conn, watch_slot

cdef class ClientConn(RespConnection):
    cdef public object router, cells
    cdef public list _out
    cdef public bint _close_after, _queued
    cdef public Outbox outbox

    cpdef fill(self, list cell, object data)
    cpdef _write(self, data)
