# Cython declarations for router/routes.py (pure-Python mode; node/native.py, setup.py).
# The router's dispatch reads a command's Route on every request.

cdef class Route:
    cdef public object kind, spec, handler, request_policy, response_policy, subs
    cdef public bytes name
    cdef public bint write, blocking, no_auth, run_in_multi
    cdef public Py_ssize_t fixed_key
    cdef public int arity
