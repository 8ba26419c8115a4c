# Cython declarations for node/client.py (pure-Python mode; node/native.py, setup.py).
# The flags the request path reads per command are C ints; `__dict__` keeps subclasses and
# attributes set by other modules working.

cdef class Client:
    cdef public object id, server, conn, name, addr, laddr, last_interaction_ms, last_cmd
    cdef public object multi_queue, watched, blocked, lib_name, lib_ver, woff, import_slots
    cdef public object acl, user
    cdef public int proto
    cdef public bint authenticated, in_multi, multi_failed, in_exec, dirty_cas, rerunning
    cdef public bint readonly, asking, close_after_reply, no_evict, is_master
    cdef public double ctime, obuf_soft_since
    cdef dict __dict__
