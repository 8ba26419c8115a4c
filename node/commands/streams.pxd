# Cython declarations for node/commands/streams.py (pure-Python mode; node/native.py, setup.py).
# The reply encoder of stream entries writes into one C buffer (see _encode_entries_c).

import cython

from node.keyspace cimport Keyspace
from node.server cimport Server
from node.stream cimport Stream

cpdef bytes encode_entries(list sids, list ents)

@cython.locals(m=Py_ssize_t, cap=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, w=Py_ssize_t,
               n=Py_ssize_t, p=Py_ssize_t, buf="char *", f=list, x=bytes, fo=object, xo=object,
               seq="unsigned long long", ms="unsigned long long")
cdef bytes _encode_entries_c(list sids, list ents)

@cython.locals(n=int)
cdef int _ndigits(unsigned long long v) noexcept

@cython.locals(end=Py_ssize_t, i=Py_ssize_t)
cdef Py_ssize_t _put_dec(char *buf, Py_ssize_t p, unsigned long long v) noexcept

@cython.locals(p=Py_ssize_t, n=Py_ssize_t, q=Py_ssize_t)
cdef bytes _id_bulk(sid)

# XADD's fast path: the stream and the key space as extension types (C field reads, cpdef calls).
@cython.locals(argc=Py_ssize_t, i=Py_ssize_t, approx=bint, db=Keyspace, s=Stream, opt=bytes,
               idarg=bytes, ids=bytes, reply=bytes, node=Server)
cpdef bytes xadd(c, list argv)
