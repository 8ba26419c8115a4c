# Cython declarations for router/proxy.py (pure-Python mode; node/native.py, setup.py).
# The Router's fields are read on every request (dispatch); `__dict__` keeps attributes that
# other modules attach working. `dispatch` and `_keyed` run per request with the client, its
# connection and the route typed; `primary_pool` finds the pool of most requests. The fields
# and methods that client connections and requests call are RouterCore's (router/client.pxd).

cimport cython

from node.commands.reads cimport XReadOptions, parse_xread_options
from node.preflight cimport preflight, rejected, unknown
from node.slots cimport key_slot
from router.client cimport ClientConn, RouterClient, RouterCore
from router.forward cimport BlockedRead, Forward, blocked_read, to_cell
from router.outbox cimport Outbox
from router.pstreamwrite cimport relay
from router.routes cimport Route
from router.upstream cimport Pool

cdef dict _SPELLED

cdef class Router(RouterCore):
    cdef public object config, loop, map, router_id, host, routers, node_password, node_user
    cdef public object pools, clients, acl, acl_sync, monitors, role, db, blocking
    cdef public object start_time, redirects, tcp_server, tls_server
    cdef public object now_ms, _clock_timer
    cdef public object tls_client_context
    cdef public dict primary_addr, pstreams
    cdef public tuple primary_pools
    cdef public list slot_owner
    cdef public double cluster_down_timeout
    cdef public Py_ssize_t next_client_id
    cdef public Outbox outbox
    cdef dict __dict__

    @cython.locals(conn=ClientConn, route=Route)
    cpdef dispatch(self, RouterClient c, list argv, list cell, object raw=*)

    @cython.locals(conn=ClientConn, fk=Py_ssize_t, f=Forward)
    cpdef _keyed(self, RouterClient c, list argv, Route route, list cell, object raw)

    @cython.locals(first=Py_ssize_t, nkeys=Py_ssize_t, i=Py_ssize_t, slot=Py_ssize_t,
                   b=BlockedRead, f=Forward)
    @cython.locals(options=XReadOptions)
    cdef _xread(self, RouterClient c, list argv, Route route, list cell, object raw)

    cpdef node_for(self, object slot, bint replica)

    @cython.locals(pools=dict, p=Pool)
    cpdef Pool primary_pool(self, Py_ssize_t slot, int proto)

    @cython.locals(p=Pool)
    cpdef Pool pool(self, object addr, int proto, bint readonly=*)
