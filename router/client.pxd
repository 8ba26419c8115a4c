# Cython declarations for router/client.py (pure-Python mode; node/native.py, setup.py).

cimport cython

from node.client cimport Client
from node.cmdstats cimport CommandStats
from node.protocol cimport RespConnection
from router.metrics cimport UpstreamStats
from router.outbox cimport Outbox, Writer
from router.upstream cimport Pool

cdef Py_ssize_t _MAX_CELLS

cdef class RouterClient(Client):
    cdef public object written, wrote_last, txn_slot, watch_conn, watch_slot

cdef class RouterCore:
    cdef public CommandStats stats
    cdef public UpstreamStats upstream

    cpdef dispatch(self, RouterClient c, list argv, list cell, object raw=*)
    cpdef Pool primary_pool(self, Py_ssize_t slot, int proto)

# final: its cpdef methods are C calls from router/forward.py and the outbox, with no lookup of
# an override by name (which a class with a `__dict__`, RespConnection's, would do per call).
@cython.final
cdef class ClientConn(RespConnection):
    cdef public RouterCore router
    cdef public list cells, _out
    cdef public Py_ssize_t _head, reads
    cdef public bint _close_after, _queued
    cdef public Outbox outbox
    cdef public Writer _writer
    cdef public object _send

    @cython.locals(cells=list, head=Py_ssize_t, n=Py_ssize_t, out=list, first=list)
    cpdef fill(self, list cell, object data)
    cpdef flush(self)
    # (_after_run overrides RespConnection's cdef method; a final class may not redeclare it)

cdef class ReplyWriter(Writer):
    cdef public ClientConn conn

    cpdef flush(self)
