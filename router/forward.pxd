# Cython declarations for router/forward.py (pure-Python mode; node/native.py, setup.py).
# A Forward is made for every relayed request and is its reply callback.

cdef class Forward:
    cdef public object router, c, data, slot, cell, done, addr, added
    cdef public bint write
    cdef public Py_ssize_t attempt
    cdef public double deadline, sent
