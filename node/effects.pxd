# Cython declarations for node/effects.py (pure-Python mode; node/native.py, setup.py).

cdef class EffectLog:
    cdef public object offset, _batch
    cdef public list listeners
    cdef public bint in_multi
    cdef public Py_ssize_t replaying

    cpdef emit(self, argv)
    cpdef publish(self, data)

cdef class EffectBuffer:
    cdef public list parts
    cdef public Py_ssize_t size
    cdef public bint scheduled, open
    cdef public object loop, flush

cdef class ReplicationFeed(EffectBuffer):
    cdef public object owner

import cython

# The offset of every effect nobody listens to (XADD with appendonly no): typed, a C loop.
@cython.locals(n=Py_ssize_t, la=Py_ssize_t, a=bytes, c=Py_ssize_t)
cpdef Py_ssize_t _command_len(list argv) except -1
