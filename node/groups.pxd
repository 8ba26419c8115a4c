# Cython declarations for node/groups.py (pure-Python mode; node/native.py, setup.py).
# Consumer and ConsumerGroup are extension types: their fields are C struct members and the
# PEL operations of a read or an XACK are cpdef, called directly by the typed handlers
# (node/commands/reads.pxd, node/commands/groups.pxd). IDs are 128-bit Python ints (object);
# times are unix ms, 64-bit.

import cython

from node.stream cimport Stream

cdef class Consumer:
    cdef public object name, pel
    cdef public Py_ssize_t seen_time, active_time

cdef class ConsumerGroup:
    cdef public object last_id, entries_read, pel
    cdef public dict consumers
    cdef public Py_ssize_t nacked_total

    @cython.locals(nack=tuple, maxes=list)
    cpdef deliver(self, sid, Consumer cons, now_ms)
    cpdef _own(self, sid, Consumer cons)

    @cython.locals(keys=object, maxes=list, nack=tuple)
    cpdef deliver_run(self, list sids, Consumer cons, now_ms)

    @cython.locals(d=dict)
    cdef _append_new(self, list sids, Consumer cons, tuple nack)

    @cython.locals(nack=tuple, maxes=list)
    cpdef set_nack(self, sid, Consumer cons, delivery_time, delivery_count)

    @cython.locals(acked=list, names=list, k=Py_ssize_t, ordered=list,
                   consumers=dict, nack=object)
    cpdef Py_ssize_t ack_many(self, list sids) except -1

    @cython.locals(moved=bint, i=Py_ssize_t, rest=Py_ssize_t)
    cpdef bint advance_run(self, Stream s, list sids) except -1

    cpdef bint advance(self, Stream s, sid) except -1

cpdef bint range_has_tombstones(Stream s, start, end) except -1

@cython.locals(d=dict, lists=list, maxes=list, last=list, n=Py_ssize_t, i=Py_ssize_t,
               load=Py_ssize_t, index=list)
cdef _extend_tail(sl, list sids)

@cython.locals(d=dict, lists=list, first=list, k=Py_ssize_t, maxes=list, index=list)
cdef _remove_members(sl, list ordered)
