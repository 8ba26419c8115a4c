# Cython declarations for node/preflight.py (pure-Python mode; node/native.py, setup.py).
# The node's execute and the router's dispatch call these per request: C calls, with the
# client's flags read as C fields.

cimport cython

from node.client cimport Client

@cython.locals(n=Py_ssize_t)
cpdef preflight(object acl, Client c, object argv, bytes name, int arity)
cpdef bytes unknown(Client c, object argv)
cpdef bytes rejected(Client c, object name, bytes message)

cdef object _NO_AUTH
