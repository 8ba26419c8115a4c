# Cython declarations for node/protocol.py (pure-Python mode; node/native.py, setup.py).
# Methods stay `def` so that the node's and the router's subclasses override them as before.

cimport cython

from node.client cimport Client

cdef class RespConnection:
    cdef public object server, execute, transport, reader, _span
    cdef public Client client
    cdef public bytes _slow
    cdef public bint _boundary, _closing, _write_paused, _read_paused, _halt
    cdef public Py_ssize_t _span_len, _done, _stalls, _pending
    cdef public object _big, raw
    cdef dict __dict__

cpdef bint _all_bulk(list argv)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, base="char *", q="char *")
cdef bint _big_count(object data) except -1
