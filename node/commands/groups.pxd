# Cython declarations for node/commands/groups.py (pure-Python mode; node/native.py, setup.py).
# XACK's ID parsing and the offset of the XCLAIMs nobody listens to are C loops.

import cython

from node.groups cimport Consumer, ConsumerGroup
from node.keyspace cimport Keyspace
from node.stream cimport Stream

cdef Py_ssize_t _arg_len(Py_ssize_t n) except -1

cdef Py_ssize_t _id_len(object sid) except -1

@cython.locals(p=Py_ssize_t)
cpdef bytes _id_text(object sid)

cdef bytes _dec_text(object v)

@cython.locals(fixed=Py_ssize_t, total=Py_ssize_t, n=Py_ssize_t)
cpdef Py_ssize_t xclaim_run_len(key, groupname, consumer, now_ms, list sids) except -1

cdef list _plain_ids_c(args)

# Plain IDs and integers (every effect a replica applies holds a few) read by C loops.
@cython.locals(v="unsigned long long", d="unsigned long long", lim="unsigned long long",
               ch=int)
cdef Py_ssize_t _dec(const unsigned char *p, Py_ssize_t i, Py_ssize_t n,
                     unsigned long long *out) noexcept

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, p="const unsigned char *", ms="unsigned long long",
               seq="unsigned long long")
cdef object _plain_id_c(a)

@cython.locals(n=Py_ssize_t, p="const unsigned char *", v="unsigned long long")
cpdef long long plain_uint(a) noexcept

cdef object _int_arg(b, bytes error)

@cython.locals(ch=int)
cdef object _strict_id(b)

cdef dict _LOWER
cdef bytes _option(bytes b)

# The group commands of the XREADGROUP + XACK pair: stream, group and consumer typed.
cpdef propagate_group_id(c, key, groupname, ConsumerGroup g)

@cython.locals(cons=Consumer)
cpdef Consumer lookup_or_create_consumer(c, key, groupname, ConsumerGroup g, name)

@cython.locals(db=Keyspace, s=Stream, g=ConsumerGroup, acked=Py_ssize_t, ids=list)
cpdef bytes xack(c, argv)

cpdef list parse_strict_ids_or_error(args)

# XCLAIM: every delivery a replica applies is one.
@cython.locals(s=Stream, g=ConsumerGroup, argc=Py_ssize_t, j=Py_ssize_t, out=list, ids=list)
cpdef bytes xclaim(c, argv)

@cython.locals(cons=Consumer, out=list)
cdef list _claim(c, key, groupname, Stream s, ConsumerGroup g, name, list ids, minidle,
                 retrycount, deliverytime, bint force, bint justid, last_id, now, bint replies)

# A replica's apply of the group effects of a delivery (node/effects.py EffectApplier._direct).
@cython.locals(s=Stream, g=ConsumerGroup, out=list)
cpdef apply_xclaim_effect(c, list argv)

@cython.locals(g=ConsumerGroup, n="long long")
cpdef apply_setid_effect(c, list argv)

@cython.locals(db=Keyspace, s=object)
cdef tuple _live_group(c, key, groupname)

@cython.locals(argc=Py_ssize_t, moreargs=Py_ssize_t)
cdef tuple _xclaim_options(list argv, Py_ssize_t j, now)
