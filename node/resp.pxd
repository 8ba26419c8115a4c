# Cython declarations for node/resp.py (pure-Python mode; node/native.py, setup.py).
# encode_command is on the router's relay path (every request) and the node's effect path.

cimport cython

# An array's header: a C call from _encode_into (a reply tree's lists).
cpdef bytes array_header(Py_ssize_t n)

# XREAD/XREADGROUP's reply headers: C calls from node/commands/reads.py.
cpdef bytes keyed_header(Py_ssize_t n, int proto)
cpdef bytes keyed_key_header(Py_ssize_t klen, int proto)

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, parts=list, heads=list, out=object)
cpdef bytes encode_command(argv)

@cython.locals(heads=list, head=bytes, h=bytes, total=Py_ssize_t, k=Py_ssize_t,
               out=bytes, p="char *")
cdef object _encode_command_c(argv, Py_ssize_t n)

# reply_scan frames every reply the router relays (router/upstream.py calls it as C).
cpdef tuple reply_scan(object buf, Py_ssize_t pos, Py_ssize_t need=*)

@cython.locals(n=Py_ssize_t, base="const char *", q="const char *", e=Py_ssize_t,
               t=cython.uchar, i=Py_ssize_t, neg=bint, v=Py_ssize_t, d=int, end=Py_ssize_t)
cdef object _scan_bytes(bytes buf, Py_ssize_t pos, Py_ssize_t need)
