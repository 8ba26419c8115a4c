# Cython declarations for node/server.py (pure-Python mode; node/native.py, setup.py).
# Server is an extension type with every attribute of its __init__ declared; `__dict__` keeps
# attributes other parts attach working. Connection stays a Python subclass of
# node.protocol.RespConnection (its methods override the base's).

import cython

from node.client cimport Client
from node.effects cimport EffectLog

cdef long long _clock_ns(bint wall) noexcept

@cython.locals(n=int)
cdef int _bit_length(long long v) noexcept

cdef class Server:
    cdef public object config, config_file, loop, db, blocking, stats, clients
    cdef public EffectLog effects
    cdef public object next_client_id, start_time, run_id, dirty, role, peak_memory
    cdef public bint active_expire_enabled
    cdef public object cmd_time_ms, tcp_server, pauses, taps, move_stats, reply_gate
    cdef public object persistence, replication, child_saver, agent, cluster
    cdef public object config_listeners, shutdown_hook, slowlog, latency, monitors, metrics
    cdef public object slow_usec, acl, memory_limit, oom
    cdef public object tls_server, tls_context, tls_client_context
    cdef public dict _dispatch, _calls
    cdef dict __dict__
    cdef object __weakref__

    # The command path: a real Client (C field reads), direct calls between these methods.
    @cython.locals(n=Py_ssize_t, write=object)
    cpdef execute(self, Client c, argv)
    cpdef refusal(self, Client c, argv, name, bint write)
    @cython.locals(t0="long long", ns="long long", usec="long long", effects=EffectLog)
    cpdef call(self, Client c, argv, name, handler)
    cpdef check_fence(self)
    cpdef check_misconf(self)
    cpdef check_noreplicas(self)
    cpdef check_readonly(self)
    cpdef propagate(self, argv)
    cpdef now_ms(self)
