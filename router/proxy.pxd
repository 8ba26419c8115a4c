# Cython declarations for router/proxy.py (pure-Python mode; node/native.py, setup.py).
# The Router's fields are read on every request (dispatch); `__dict__` keeps attributes that
# other modules attach working.

from router.outbox cimport Outbox

cdef class Router:
    cdef public object config, loop, map, router_id, host, routers, node_password, node_user
    cdef public object pools, clients, acl, acl_sync, monitors, role, db, blocking, stats
    cdef public object start_time, redirects, upstream, tcp_server, tls_server
    cdef public object tls_client_context
    cdef public dict primary_addr
    cdef public double cluster_down_timeout
    cdef public Py_ssize_t next_client_id
    cdef public Outbox outbox
    cdef dict __dict__
