# Cython declarations for node/commands/reads.py (pure-Python mode; node/native.py, setup.py).
# XREADGROUP's `>` path: the stream, the group and the consumer as extension types (C field
# reads, cpdef PEL operations); the client stays untyped (the in-process tests' stand-in).

import cython

from node.commands.groups cimport plain_uint
from node.groups cimport Consumer, ConsumerGroup
from node.keyspace cimport Keyspace
from node.stream cimport Stream

# The options of one XREAD/XREADGROUP, read by name as C members (here and in the router).
cdef class XReadOptions:
    cdef public long long timeout, claim, maxsize
    cdef public Py_ssize_t count, first_key, nkeys, block_at, maxcount
    cdef public bint noack
    cdef public object group, consumer

# MAXSIZE's running count of the reply's bytes.
cdef class _Budget:
    cdef public long long maxsize, used
    cdef public Py_ssize_t entries

    cpdef bint spent(self) except -1
    cpdef add(self, Py_ssize_t nbytes)

# "The stream has an entry after the group's last delivered ID", a C call from each user.
cdef inline bint _has_new(Stream s, ConsumerGroup g) except -1

@cython.locals(count=Py_ssize_t, nkeys=Py_ssize_t, idx=Py_ssize_t, s=Stream, o=XReadOptions,
               streams=list, groups=list, ids=list, dollars=list, parts=list,
               served=Py_ssize_t, n=Py_ssize_t, left=Py_ssize_t, proto=int, budget=_Budget,
               head=bytes)
cpdef bytes xread(c, argv)

@cython.locals(xreadgroup=bint, first_id=Py_ssize_t, idx=Py_ssize_t, db=Keyspace, s=Stream)
cdef _resolve_ids(c, list argv, XReadOptions o, list keys, list streams, list groups,
                  list ids, list dollars)

@cython.locals(cons=Consumer, n=Py_ssize_t, n2=Py_ssize_t)
cdef tuple _serve_group(c, Stream s, ConsumerGroup g, key, XReadOptions o, gt,
                        Py_ssize_t count, _Budget budget)

@cython.locals(n=Py_ssize_t, parts=list, moved=bint, listening=bint, sids=list, ents=object,
               cut=bint)
cpdef tuple serve_new(c, Stream s, ConsumerGroup g, Consumer cons, key, groupname, start,
                      Py_ssize_t count, bint noack, bint claim=*, _Budget budget=*,
                      bint forced=*)

@cython.locals(o=XReadOptions)
cdef XReadOptions _new_options()

@cython.locals(argc=Py_ssize_t, xreadgroup=bint, count=object, o=XReadOptions, i=Py_ssize_t,
               moreargs=Py_ssize_t, n=Py_ssize_t, opt=object)
cpdef XReadOptions parse_xread_options(argv, now_ms)

@cython.locals(s=Stream, g=ConsumerGroup)
cpdef bint still_unserved(c, b) except -1
