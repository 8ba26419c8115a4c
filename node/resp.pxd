# Cython declarations for node/resp.py (pure-Python mode; node/native.py, setup.py).
# encode_command is on the router's relay path (every request) and the node's effect path.

cimport cython

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, parts=list, heads=list)
cpdef bytes encode_command(argv)
