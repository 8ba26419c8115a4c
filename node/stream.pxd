# Cython declarations for node/stream.py (pure-Python mode; node/native.py, setup.py).
# An ID is a 128-bit Python int (ms << 64 | seq) where other code needs one; the stream's last
# ID is two C uint64 fields, so XADD computes and checks IDs without Python-int arithmetic
# (the int of the two parts: xshard_make_id, node/streamnodes.pxd).

import cython

from libc.stdint cimport uint64_t

from node.listpack cimport _isz, _sum_esz
from node.streamnodes cimport Tail, xshard_make_id

cdef Py_ssize_t _LP_MAX
cdef unsigned long long _U64_MAX

cdef object _make_id(unsigned long long ms, unsigned long long seq)

# Partition keys: the next sequence number with the key's residue (0: none left).
@cython.locals(gap="unsigned long long")
cpdef unsigned long long seq_above(unsigned long long last, unsigned long long stride,
                                   unsigned long long residue)

cdef class Stream:
    cdef public Py_ssize_t length
    cdef public uint64_t last_ms, last_seq
    cdef public object first_id, max_deleted_entry_id, entries_added
    cdef public dict groups
    cdef public object idmp
    # The key name's partition rule (bind_key): stride -1 not derived yet, 0 plain, else S.
    cdef public Py_ssize_t stride, residue
    cdef public list _firsts, _nodes
    cdef public Tail _tail
    cdef object __weakref__

    cpdef Py_ssize_t bind_key(self, key)
    cpdef next_auto_id(self, now_ms)

    cpdef append(self, sid, list fields, Py_ssize_t max_entries, Py_ssize_t max_bytes)
    cpdef append_id(self, unsigned long long ms, unsigned long long seq, list fields,
                    Py_ssize_t max_entries, Py_ssize_t max_bytes)

    # XADD's hot path: the ID parts, the open tail's counters and lists as C values.
    @cython.locals(t=Tail, tot=Py_ssize_t, live=Py_ssize_t, ndel=Py_ssize_t, size=Py_ssize_t,
                   k=Py_ssize_t, nf=Py_ssize_t, n=Py_ssize_t, vals=list, nf2=Py_ssize_t,
                   j=Py_ssize_t, x=bytes, same=bint, master=list, ms0="unsigned long long",
                   seq0="unsigned long long", msd="unsigned long long")
    cdef _append(self, unsigned long long ms, unsigned long long seq, sid, list fields,
                 Py_ssize_t max_entries, Py_ssize_t max_bytes)
