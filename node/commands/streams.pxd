# Cython declarations for node/commands/streams.py (pure-Python mode; node/native.py, setup.py).
# XADD's fast path is typed; its reply is written by node.commands.entryreplies.id_bulk.

import cython

from node.client cimport Client as _CClient
from node.keyspace cimport Keyspace
from node.server cimport Server
from node.stream cimport Stream, seq_above

cdef unsigned long long _U64_MAX

# XADD's fast path: the stream and the key space as extension types (C field reads, cpdef calls).
@cython.locals(argc=Py_ssize_t, i=Py_ssize_t, approx=bint, db=Keyspace, s=Stream, opt=bytes,
               idarg=bytes, ids=bytes, reply=bytes, node=Server, auto=bint,
               ms="unsigned long long", seq="unsigned long long", now="unsigned long long",
               off=Py_ssize_t, st=Py_ssize_t)
cpdef bytes xadd(c, list argv)
