# Cython declarations for router/outbox.py (pure-Python mode; node/native.py, setup.py).

cdef class Outbox:
    cdef public object loop
    cdef public list pending
    cdef public bint scheduled, urgent

    cpdef add(self, object w)
    cpdef now(self)
