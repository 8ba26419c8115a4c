# Cython declarations for router/metrics.py (pure-Python mode; node/native.py, setup.py).
# `replied` runs once per relayed reply (router/forward.py).

cimport cython

from router.forward cimport Forward

cdef class UpstreamStats:
    cdef public object router, times, errors, _nodes, _by_addr
    cdef public Py_ssize_t clusterdown_waits

    @cython.locals(dt=double, h=object)
    cpdef replied(self, Forward f, object r)
