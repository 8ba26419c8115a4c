# Cython declarations for node/commands/reads.py (pure-Python mode; node/native.py, setup.py).
# XREADGROUP's `>` path: the stream, the group and the consumer as extension types (C field
# reads, cpdef PEL operations); the client stays untyped (the in-process tests' stand-in).

import cython

from node.commands.groups cimport plain_uint
from node.groups cimport Consumer, ConsumerGroup
from node.keyspace cimport Keyspace
from node.stream cimport Stream

# "The stream has an entry after the group's last delivered ID", a C call from each user.
cdef inline bint _has_new(Stream s, ConsumerGroup g) except -1

@cython.locals(xreadgroup=bint, count=Py_ssize_t, noack=bint, streams_arg=Py_ssize_t,
               nkeys=Py_ssize_t, claim="long long", idx=Py_ssize_t, db=Keyspace, s=Stream,
               g=ConsumerGroup, cons=Consumer, streams=list, groups=list, ids=list,
               dollars=list, parts=list, served=Py_ssize_t, n=Py_ssize_t, n2=Py_ssize_t,
               history=bint, proto=int, klen=Py_ssize_t)
cpdef bytes xread(c, argv)

@cython.locals(n=Py_ssize_t, parts=list, moved=bint, listening=bint, sids=list, ents=object)
cpdef tuple serve_new(c, Stream s, ConsumerGroup g, Consumer cons, key, groupname, start,
                      Py_ssize_t count, bint noack, bint claim=*)

@cython.locals(argc=Py_ssize_t, xreadgroup=bint, count=object, noack=bint,
               streams_arg=Py_ssize_t, nkeys=Py_ssize_t, block_arg=Py_ssize_t, i=Py_ssize_t,
               moreargs=Py_ssize_t, n=Py_ssize_t, o=object)
cpdef tuple parse_xread_options(argv, now_ms)

@cython.locals(s=Stream, g=ConsumerGroup)
cpdef bint still_unserved(c, b) except -1
