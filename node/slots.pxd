# Cython declarations for node/slots.py (pure-Python mode; node/native.py, setup.py).
# The router computes a slot per request.

cimport cython

@cython.locals(n=Py_ssize_t, base="char *", q="char *", s=Py_ssize_t)
cpdef int key_slot(object key) except -1
