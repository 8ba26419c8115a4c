# Cython declarations for node/effects.py (pure-Python mode; node/native.py, setup.py).

cdef class EffectLog:
    cdef public object offset, _batch
    cdef public list listeners
    cdef public bint in_multi
    cdef public Py_ssize_t replaying
