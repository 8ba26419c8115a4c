# Cython declarations for router/outbox.py (pure-Python mode; node/native.py, setup.py).

cimport cython

cdef class Writer:
    cpdef flush(self)

cdef class Outbox:
    cdef public object loop
    cdef public list pending
    cdef public bint scheduled, urgent

    cpdef add(self, Writer w)
    cpdef bint hold(self)
    cpdef unhold(self, bint held)
    @cython.locals(pending=list, w=Writer)
    cpdef now(self)
