# Cython declarations for node/server.py (pure-Python mode; node/native.py, setup.py).
# Server is an extension type with every attribute of its __init__ declared; `__dict__` keeps
# attributes other parts attach working. Connection is an extension subclass of
# node.protocol.RespConnection: a read's reply batch reaches the socket by C calls.

import cython

from node.client cimport Client
from node.cmdstats cimport CallStats, CommandStats
from node.effects cimport EffectLog
from node.preflight cimport preflight, rejected, unknown
from node.protocol cimport RespConnection

cdef long long _clock_ns(bint wall) noexcept

@cython.locals(n=int)
cdef int _bit_length(long long v) noexcept

cdef class Command:
    cdef public bytes name
    cdef public object handler
    cdef public int arity, write

cdef class Server:
    cdef public object config, config_file, loop, db, blocking, clients
    cdef public CommandStats stats
    cdef public EffectLog effects
    cdef public object next_client_id, start_time, run_id, dirty, role, peak_memory
    cdef public bint active_expire_enabled
    cdef public object cmd_time_ms
    cdef public Py_ssize_t slow_usec
    cdef public object tcp_server, pauses, taps, move_stats, reply_gate
    cdef public object persistence, replication, child_saver, agent, cluster
    cdef public object config_listeners, shutdown_hook, slowlog, latency, metrics
    cdef public dict monitors
    cdef public object acl, memory_limit
    cdef public bint oom
    # The write checks' inputs, kept in step where they change (node/server.py __init__).
    cdef public bint persistence_healthy, following, replica_read_only
    cdef public Py_ssize_t min_replicas_to_write, min_replicas_max_lag
    cdef public object tls_server, tls_context, tls_client_context
    cdef public dict _dispatch, _spelled, _calls, _ready
    cdef public object _last_spelling
    cdef public Command _last_command
    cdef public bint pauses_held
    cdef dict __dict__
    cdef object __weakref__

    # The command path: a real Client (C field reads), direct calls between these methods.
    @cython.locals(write=int, cmd=Command, raw=object)
    cpdef execute(self, Client c, argv)
    cdef _redirection(self, Client c, argv, name)
    cpdef refusal(self, Client c, argv, name, bint write)
    @cython.locals(t0="long long", ns="long long", usec="long long", effects=EffectLog,
                   st=CallStats, failed=int)
    cpdef call(self, Client c, argv, name, handler)
    cpdef check_fence(self)
    cpdef check_misconf(self)
    cpdef check_noreplicas(self)
    cpdef check_readonly(self)
    cpdef propagate(self, argv)
    cpdef now_ms(self)

cdef class Connection(RespConnection):
    cdef public object held
    cdef public Server srv

    cdef _flush_replies(self, data)
    cdef bint _held(self, data) except -1
    # The reply gate and subclasses (the tests') call or override it by name; the read path
    # calls it as C (`Connection.send(self, data)`: no override lookup).
    cpdef send(self, data)
