# Cython declarations for node/commands/streams.py (pure-Python mode; node/native.py, setup.py).
# XADD's fast path is typed; its reply is written by node.commands.entryreplies.id_bulk.

import cython

from node.client cimport Client as _CClient
from node.keyspace cimport Keyspace
from node.server cimport Server
from node.stream cimport Stream

cdef unsigned long long _U64_MAX

# XADD's fast path: the stream and the key space as extension types (C field reads, cpdef calls).
@cython.locals(argc=Py_ssize_t, i=Py_ssize_t, maxlen="long long", db=Keyspace, s=Stream,
               reply=bytes, node=Server, auto=bint, ms="unsigned long long",
               seq="unsigned long long", eff=list)
cpdef bytes xadd(c, list argv)

cdef Server _node_of(c)
@cython.locals(opt=bytes, i=Py_ssize_t)
cdef (Py_ssize_t, long long) _fast_maxlen(list argv, Py_ssize_t argc)
@cython.locals(msb=bytes, seqb=bytes)
cdef (unsigned long long, unsigned long long) _plain_id(bytes idarg)
@cython.locals(s=Stream)
cdef Stream _fast_stream(Keyspace db, key)
@cython.locals(off=Py_ssize_t)
cdef bytes _id_of_reply(bytes reply)
@cython.locals(eff=list)
cdef list _fast_effect(Stream s, list argv, Py_ssize_t i, long long maxlen, bytes ids, cfg)
