# Cython declarations for router/pstreamwrite.py (pure-Python mode; node/native.py, setup.py).
# `relay` runs for every XADD on a logical name, from the router's dispatch (router/proxy.pxd).

cimport cython

from router.client cimport ClientConn, RouterClient, RouterCore
from router.forward cimport Forward, to_cell

cdef class Writes:
    cdef public Py_ssize_t n, name_len, rr, stick, stick_client, stick_read, stuck
    cdef public list keys, slots, key_bulks
    cdef public object key_field

cdef class SpreadWrite(Forward):
    cdef public object argv, tried
    cdef public Writes w
    cdef public Py_ssize_t first

    cdef _place(self, list argv, Writes w, Py_ssize_t first)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, p=Py_ssize_t, ln=Py_ssize_t, r=bytes,
               w=Writes)
cpdef bint relay(RouterCore router, RouterClient c, list argv, object ps, list cell,
                 object raw) except -1

@cython.locals(size=Py_ssize_t, out=bytes, dst=cython.p_char, src=cython.p_char)
cdef bytes _splice(bytes r, Py_ssize_t i, Py_ssize_t ln, bytes kb)

@cython.locals(conn=ClientConn, reads=Py_ssize_t, p=Py_ssize_t)
cpdef Py_ssize_t _spread(RouterCore router, RouterClient c, Writes w) except -1

@cython.locals(n=Py_ssize_t, p=Py_ssize_t)
cpdef Py_ssize_t _next_live(object router, Writes w, int proto) except -1

@cython.locals(closed=Py_ssize_t, connecting=Py_ssize_t)
cpdef bint reachable(object pool) except -1

@cython.locals(f=SpreadWrite)
cpdef SpreadWrite spread_write(RouterCore router, RouterClient c, object data, list argv,
                               Writes w, Py_ssize_t p, list cell)
