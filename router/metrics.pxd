# Cython declarations for router/metrics.py (pure-Python mode; node/native.py, setup.py).
# `replied` runs once per relayed reply (router/forward.py).

cimport cython

@cython.locals(i=Py_ssize_t, n=Py_ssize_t, b=double)
cdef Py_ssize_t _bucket(tuple bounds, double v)

cdef class RoundTrips:
    cdef public tuple bounds
    cdef public list counts
    cdef public double sum

cdef class UpstreamStats:
    cdef public object router, _nodes, _by_addr
    cdef public list slot_owner
    cdef public dict times, errors
    cdef public Py_ssize_t clusterdown_waits

    @cython.locals(h=RoundTrips)
    cpdef replied(self, object slot, object addr, bytes r, double dt)
