# Cython declarations for node/listpack.py (pure-Python mode; node/native.py, setup.py).
# XADD sizes every value with _sum_esz: typed, it is a loop over C lengths and bytes.

import cython

@cython.locals(s=Py_ssize_t, n=Py_ssize_t, c0=int, b=bytes, t=bytes, z=Py_ssize_t,
               lo=Py_ssize_t, hi=Py_ssize_t, i=Py_ssize_t, end=Py_ssize_t)
cpdef Py_ssize_t _sum_esz(list items, Py_ssize_t start=*, Py_ssize_t step=*) except -1

cpdef int _isz(long long v) noexcept
