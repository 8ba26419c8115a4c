# Cython declarations for node/keyspace.py (pure-Python mode; node/native.py, setup.py).

import cython

cdef class Keyspace:
    cdef public dict data, slots, expires, watchers, _waiting
    cdef public object server, _expire_cursor
    cdef public Py_ssize_t expired_keys
    cdef public bint expiry_paused

    # Every stream command starts with get_stream; every write ends with changed.
    cpdef get_stream(self, key)
    @cython.locals(waiting=dict)
    cpdef changed(self, key, bint ready=*)
