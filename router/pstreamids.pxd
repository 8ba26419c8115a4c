# Cython declarations for router/pstreamids.py (pure-Python mode; node/native.py, setup.py).
# `one_partition` runs for every XACK on a logical name (router/pstreams.py).

cimport cython

ctypedef unsigned long long u64
ctypedef const char* cchars

cdef u64 _SEQ_MAX_TENTH

@cython.locals(p=Py_ssize_t, q=Py_ssize_t, b=bytes)
cpdef Py_ssize_t one_partition(list ids, Py_ssize_t stride, Py_ssize_t n) except -2

@cython.locals(s=cchars, x=object, i=Py_ssize_t, j=Py_ssize_t, ln=Py_ssize_t, v=u64, d=int)
cdef Py_ssize_t _seq_mod(bytes b, Py_ssize_t stride) except -2
