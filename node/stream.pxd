# Cython declarations for node/stream.py (pure-Python mode; node/native.py, setup.py).
# IDs are 128-bit Python ints (ms << 64 | seq), so they stay `object`; counters are C ints.

import cython

from node.listpack cimport _sum_esz
from node.streamnodes cimport Tail

cdef class Stream:
    cdef public Py_ssize_t length
    cdef public object last_id, first_id, max_deleted_entry_id, entries_added
    cdef public dict groups
    cdef public object idmp
    cdef public list _firsts, _nodes
    cdef public Tail _tail
    cdef object __weakref__

    cpdef next_auto_id(self, now_ms)

    # XADD's hot path: the open tail's counters and lists as C fields and typed locals.
    @cython.locals(t=Tail, tot=Py_ssize_t, live=Py_ssize_t, ndel=Py_ssize_t, size=Py_ssize_t,
                   k=Py_ssize_t, nf=Py_ssize_t, n=Py_ssize_t, vals=list, nf2=Py_ssize_t,
                   j=Py_ssize_t, x=bytes, same=bint, master=list)
    cpdef append(self, sid, list fields, Py_ssize_t max_entries, Py_ssize_t max_bytes)
