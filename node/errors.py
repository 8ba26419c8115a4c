"""Every error text of the node, once, byte-identical to Redis, plus the integer parsers, and
the exception classes of the error replies the node reads from other servers.

Texts are the message without the leading '-'; raise them as `ReplyError(TEXT)`. The integer
helpers follow Redis's own parsing rules (string2ll, string2ull) so that the same odd input gets
the same reply; stream IDs are parsed in node/streamid.py. An error reply that comes back from
another server (node/link.py) becomes a `ResponseError` subclass through one table,
EXCEPTION_CLASSES, as redis-py's parsers do: callers catch `MovedError` or `NoAuthError`, they
never compare reply bytes.
"""

from __future__ import annotations

from node.resp import ReplyError, error, error_code, parse_redirect

# --- generic ---------------------------------------------------------------------------------
SYNTAX = b"ERR syntax error"
NOT_INTEGER = b"ERR value is not an integer or out of range"
NOT_FLOAT = b"ERR value is not a valid float"
WRONGTYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"
NO_SUCH_KEY = b"ERR no such key"
NOAUTH = b"NOAUTH Authentication required."
WRONGPASS = b"WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED = (
    b"ERR AUTH <password> called without any password configured for the default user. "
    b"Are you sure your configuration is correct?"
)
DB_INDEX_OUT_OF_RANGE = b"ERR DB index is out of range"
NOPROTO = b"NOPROTO unsupported protocol version"
TIMEOUT_NEGATIVE = b"ERR timeout is negative"
TIMEOUT_NOT_INTEGER = b"ERR timeout is not an integer or out of range"
CLIENT_PAUSE_MODE = b"ERR CLIENT PAUSE mode must be WRITE or ALL"
INVALID_EXPIRE = b"ERR invalid expire time in '%s' command"
MULTI_NESTED = b"ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = b"ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = b"ERR DISCARD without MULTI"
WATCH_IN_MULTI = b"ERR WATCH inside MULTI is not allowed"
EXECABORT = b"EXECABORT Transaction discarded because of previous errors."
UNBLOCKED_BY_CLIENT = b"UNBLOCKED client unblocked via CLIENT UNBLOCK"
DEBUG_DISABLED = (
    b"ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
    b"you can run it from a local connection, otherwise you need to set this option in the "
    b"configuration file, and then restart the server."
)
READONLY = b"READONLY You can't write against a read only replica."
MAX_CLIENTS = b"ERR max number of clients reached"


def protocol_error(reason: bytes) -> bytes:
    """networking.c setProtocolError: the reply sent just before the connection is closed."""
    return b"ERR Protocol error: %s" % reason


def internal_error(e: Exception) -> bytes:
    """A handler bug: the client gets this instead of the node going down."""
    return b"ERR internal error: %s" % str(e).encode(errors="replace")[:200]


def execabort_because(err: bytes) -> bytes:
    """multi.c execCommandAbort: EXEC itself was rejected, quoting why."""
    return b"EXECABORT Transaction discarded because of: %s" % err


EXEC_ARITY_ABORT = execabort_because(b"wrong number of arguments for 'exec' command")


def unknown_command(name: bytes, args: list[bytes]) -> bytes:
    """Redis: "unknown command 'x', with args beginning with: 'a' 'b' "."""
    shown = b""
    for a in args:  # Redis stops once the list reaches 128 characters, cutting the last one
        if len(shown) >= 128:
            break
        shown += b"'%s' " % _sanitize(a[:128 - len(shown)])
    return b"ERR unknown command '%s', with args beginning with: %s" % (_sanitize(name[:128]), shown)


def unknown_subcommand(sub: bytes, cmd: bytes) -> bytes:
    return b"ERR unknown subcommand '%s'. Try %s HELP." % (_sanitize(sub[:128]), cmd.upper())


def wrong_arity(name: bytes) -> bytes:
    return b"ERR wrong number of arguments for '%s' command" % name.lower()


def _sanitize(b: bytes) -> bytes:
    """As Redis's "%.128s": stop at a NUL; and newlines become spaces so the reply stays one line."""
    return b.split(b"\0", 1)[0].replace(b"\r", b" ").replace(b"\n", b" ")


# --- integers, Redis rules ------------------------------------------------------------------
LLONG_MAX = (1 << 63) - 1
LLONG_MIN = -(1 << 63)
ULLONG_MAX = (1 << 64) - 1


def string2ll(b: bytes) -> int | None:
    """Redis string2ll: strict decimal, no spaces, no '+', no leading zeros, fits in int64."""
    n = len(b)
    if n == 0 or n > 20:
        return None
    if n == 1 and b == b"0":
        return 0
    s = b[1:] if b[0] == 45 else b  # '-'
    if not s or s[0] < 49 or s[0] > 57 or not s.isdigit():
        return None
    v = int(b)
    if v > LLONG_MAX or v < LLONG_MIN:
        return None
    return v


_SPACE = b" \t\n\v\f\r"


def string2ull(b: bytes) -> int | None:
    """Redis string2ull: string2ll for non-negatives, else C strtoull (spaces, sign, wraparound)."""
    v = string2ll(b)
    if v is not None:
        return v if v >= 0 else None
    s = b.lstrip(_SPACE)
    neg = False
    if s[:1] in (b"+", b"-"):
        neg = s[:1] == b"-"
        s = s[1:]
    if not s or not s.isdigit():
        return None
    v = int(s)
    if v > ULLONG_MAX:
        return None
    return (-v) & ULLONG_MAX if neg else v


def parse_int_or_error(b: bytes, error: bytes = NOT_INTEGER) -> int:
    v = string2ll(b)
    if v is None:
        raise ReplyError(error)
    return v


def parse_non_negative_or_error(b: bytes, negative: bytes,
                                not_integer: bytes = NOT_INTEGER) -> int:
    """An integer argument that must not be negative (MAXLEN, LIMIT, ENTRIESADDED, BLOCK):
    Redis checks that it is an integer first, then its sign, each with its own error."""
    v = parse_int_or_error(b, not_integer)
    if v < 0:
        raise ReplyError(negative)
    return v


def parse_timeout_ms_or_error(b: bytes) -> int:
    """A BLOCK argument in milliseconds: 0 means forever."""
    return parse_non_negative_or_error(b, TIMEOUT_NEGATIVE, TIMEOUT_NOT_INTEGER)


# --- stream IDs (parsed in node/streamid.py) ------------------------------------------------
INVALID_STREAM_ID = b"ERR Invalid stream ID specified as stream command argument"

# --- COMMAND GETKEYS / GETKEYSANDFLAGS (db.c getKeysSubcommandImpl) ---------------------------
GETKEYS_INVALID_COMMAND = b"ERR Invalid command specified"
GETKEYS_NO_KEYS = b"ERR The command has no key arguments"
GETKEYS_WRONG_ARITY = b"ERR Invalid number of arguments specified for command"
GETKEYS_INVALID_ARGS = b"ERR Invalid arguments specified for command"

# --- stream commands (t_stream.c xaddCommand, streamParseAddOrTrimArgsOrReply, xrange, xsetid) --
XADD_ID_ZERO = b"ERR The ID specified in XADD must be greater than 0-0"
XADD_ID_TOO_SMALL = (
    b"ERR The ID specified in XADD is equal or smaller than the target stream top item")
XADD_EXHAUSTED = b"ERR The stream has exhausted the last possible ID, unable to add more items"
XADD_TOO_LARGE = b"ERR Elements are too large to be stored"


def xadd_partition_seq(residue: int, stride: int) -> bytes:
    """An explicit XADD ID in a partition key `{TAG}NAME#p/S` whose sequence number is not
    p modulo S (node/stream.py, docs/partitioned-streams.md); xshard's own text."""
    return (b"ERR The ID specified in XADD must have a sequence number equal to %d modulo %d"
            b" in this partition key" % (residue, stride))


MAXLEN_NEGATIVE = b"ERR The MAXLEN argument must be >= 0."
LIMIT_NEGATIVE = b"ERR The LIMIT argument must be >= 0."
MAXLEN_AND_MINID = (
    b"ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
LIMIT_WITHOUT_STRATEGY = (
    b"ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
XTRIM_WITHOUT_STRATEGY = b"ERR syntax error, XTRIM must be called with a trimming strategy"
LIMIT_WITHOUT_APPROX = b"ERR syntax error, LIMIT cannot be used without the special ~ option"
INVALID_START_ID = b"ERR invalid start ID for the interval"
INVALID_END_ID = b"ERR invalid end ID for the interval"
IDMP_TWICE = b"ERR IDMP or IDMPAUTO can be given only once"
IDMP_EMPTY = b"ERR IDMP producer ID and idempotent ID must not be empty"
IDMP_DURATION_RANGE = b"ERR IDMP-DURATION must be between 1 and 86400 seconds"
IDMP_MAXSIZE_RANGE = b"ERR IDMP-MAXSIZE must be between 1 and 10000 entries"
XCFGSET_NO_PARAMETER = b"ERR At least one parameter must be specified"
# Redis 8.10's XREAD/XREADGROUP caps
MAXCOUNT_POSITIVE = b"ERR MAXCOUNT must be a positive integer"
MAXSIZE_POSITIVE = b"ERR MAXSIZE must be a positive integer"
MAXCOUNT_BELOW_COUNT = b"ERR MAXCOUNT must be greater than or equal to COUNT"
XSETID_ENTRIES_ADDED_NEGATIVE = b"ERR entries_added must be positive"
XSETID_SMALLER_THAN_MAXDEL = (
    b"ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
XSETID_SMALLER_THAN_TOP = (
    b"ERR The ID specified in XSETID is smaller than the target stream top item")
XSETID_ENTRIES_ADDED_SMALL = (
    b"ERR The entries_added specified in XSETID is smaller than the target stream length")
XSETID_SMALLER_THAN_CURRENT_MAXDEL = (
    b"ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")

# --- connection commands (networking.c clientCommand, helloCommand) -------------------------
PROTO_NOT_INTEGER = b"ERR Protocol version is not an integer or out of range"
INVALID_CLIENT_NAME = b"ERR Client names cannot contain spaces, newlines or special characters."
HELLO_NOAUTH = (
    b"NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    b"HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    b"select the RESP protocol version at the same time")
INVALID_CLIENT_ID = b"ERR Invalid client ID"
CLIENT_ID_NOT_POSITIVE = b"ERR client-id should be greater than 0"
NO_SUCH_CLIENT = b"ERR No such client"
UNBLOCK_REASON = b"ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"


def hello_syntax(opt: bytes) -> bytes:
    return b"ERR Syntax error in HELLO option '%s'" % opt


def unrecognized_option(opt: bytes) -> bytes:
    return b"ERR Unrecognized option '%s'" % opt


def invalid_client_info(attr: bytes) -> bytes:
    """CLIENT SETINFO LIB-NAME/LIB-VER with a space or a control character."""
    return b"ERR %s cannot contain spaces, newlines or special characters." % attr.upper()


def unknown_client_type(kind: bytes) -> bytes:
    return b"ERR Unknown client type '%s'" % kind


def no_such_user(user: bytes) -> bytes:
    return b"ERR No such user '%s'" % user


# --- ACL (acl.c, Redis 7.2+ texts; node/acl.py) ----------------------------------------------
NOPERM_KEY = b"NOPERM No permissions to access a key"
ACL_UNKNOWN_COMMAND = b"Unknown command or category name in ACL"
ACL_SYNTAX = b"Syntax error"
ACL_KEY_AFTER_ALL = (
    b"Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
    b"have any effect. Try 'resetkeys' to start with an empty list of patterns")
ACL_CHANNEL_AFTER_ALL = (
    b"Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does "
    b"not have any effect. Try 'resetchannels' to start with an empty list of channels")
ACL_NO_SUCH_PASSWORD = b"The password you are trying to remove from the user does not exist"
ACL_BAD_HASH = (b"The password hash must be exactly 64 characters and contain only lowercase "
                b"hexadecimal characters")
ACL_SELECTORS_UNSUPPORTED = b"Selectors are not supported by xshard"
ACL_DELETE_DEFAULT = b"ERR The 'default' user cannot be removed"
ACL_NO_FILE = (b"ERR This Redis instance is not configured to use an ACL file. You may want to "
               b"specify users via the ACL SETUSER command and then issue a CONFIG REWRITE "
               b"(assuming you have a Redis configuration file set) in order to store users in "
               b"the Redis configuration.")

ACL_SAVE_FAILED = (b"ERR There was an error trying to save the ACLs. Please check the server "
                   b"logs for more information")
ACL_GENPASS_BITS = b"ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"
ACL_SYNC_BUSY = b"ERR the ACL users in etcd kept changing; try again"


def acl_sync_failed(why: str) -> bytes:
    return b"ERR cannot write the ACL users to etcd (%s); try again" % why.encode()


def noperm_command(user: bytes, command: bytes) -> bytes:
    return b"NOPERM " + acl_denied_command(user, command)


def acl_denied_command(user: bytes, command: bytes) -> bytes:
    """getAclErrorMessage's text (ACL DRYRUN answers it as a bulk string)."""
    return b"User %s has no permissions to run the '%s' command" % (user, command)


def acl_denied_key(user: bytes, key: bytes) -> bytes:
    """getAclErrorMessage's verbose text for a key (ACL DRYRUN)."""
    return b"User %s has no permissions to access the '%s' key" % (user, key)


def acl_dryrun_no_user(user: bytes) -> bytes:
    return b"ERR User '%s' not found" % _sanitize(user)


def acl_dryrun_no_command(name: bytes) -> bytes:
    return b"ERR Command '%s' not found" % _sanitize(name)


def acl_setuser_error(op: bytes, reason: bytes) -> bytes:
    return b"ERR Error in ACL SETUSER modifier '%s': %s" % (_sanitize(op), reason)


def acl_unknown_category(cat: bytes) -> bytes:
    return b"ERR Unknown category '%s'" % _sanitize(cat)


def acl_file_error(path: str, reason: str) -> bytes:
    return b"ERR Error loading ACLs, opening file '%s': %s" % (
        path.encode(errors="replace"), reason.encode(errors="replace"))


def acl_file_line(path: str, lineno: int, reason: bytes) -> bytes:
    reason = reason[4:] if reason.startswith(b"ERR ") else reason
    return b"ERR %s:%d: %s" % (path.encode(errors="replace"), lineno, reason)


# --- key space commands (db.c, expire.c) ----------------------------------------------------
INVALID_CURSOR = b"ERR invalid cursor"
EXPIRE_NX_AND_OTHERS = b"ERR NX and XX, GT or LT options at the same time are not compatible"
EXPIRE_GT_AND_LT = b"ERR GT and LT options at the same time are not compatible"


def unsupported_option(opt: bytes) -> bytes:
    return b"ERR Unsupported option %s" % opt


# --- server administration (config.c, server.c, debug.c) -------------------------------------
NO_CONFIG_FILE = b"ERR The server is running without a config file"
WAITAOF_NUMLOCAL_RANGE = b"ERR value is out of range, value must between 0 and 1"
WAITAOF_NUMREPLICAS_RANGE = b"ERR value is out of range, must be positive"
WAITAOF_APPENDONLY_OFF = (
    b"ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")


def config_set_unknown(name: bytes) -> bytes:
    return b"ERR Unknown option or number of arguments for CONFIG SET - '%s'" % name


def config_set_failed(name: bytes, reason: bytes) -> bytes:
    return b"ERR CONFIG SET failed (possibly related to argument '%s') - %s" % (name, reason)


def load_failed(reason: str) -> bytes:
    """DEBUG RELOAD / LOADAOF could not load the data back."""
    return b"ERR Error trying to load the data set: %s" % reason.encode(errors="replace")


# CONFIG SET / config file reasons (config.c), quoted after "argument '...' - ".
CONFIG_NOT_MEMORY = "argument must be a memory value"
CONFIG_NOT_INTEGER = "argument couldn't be parsed into an integer"
CONFIG_NOT_BOOL = "argument must be 'yes' or 'no'"
CONFIG_IMMUTABLE = "can't set immutable config"
CONFIG_TLS_UPDATE = "Unable to update TLS configuration. Check server logs."
CONFIG_DUPLICATE = "duplicate parameter"
CONFIG_OBUF_FORMAT = "argument(s) must be in the format <class> <hard> <soft> <soft_seconds>"
CONFIG_OBUF_CLASS = "Invalid client class specified in buffer limit configuration."
CONFIG_OBUF_SOFT_SECONDS = "Error in soft_seconds setting in buffer limit configuration."


def config_not_one_of(choices: tuple[str, ...]) -> str:
    return f"argument(s) must be one of the following: {', '.join(choices)}"


def config_out_of_range(lo: int | None, hi: int | None) -> str:
    return f"argument must be between {lo} and {hi} inclusive"


# --- persistence (rdb.c, aof.c, server.c) ---------------------------------------------------
NO_PERSISTENCE = b"ERR persistence is not configured on this node"
NO_REPLICATION = b"ERR replication is not configured on this node"
SAVE_FAILED = b"ERR"  # rdbSave failed: Redis says no more; the reason is in the log
BGSAVE_IN_PROGRESS = b"ERR Background save already in progress"
BGSAVE_CHILD_ACTIVE = (
    b"ERR Another child process is active (AOF?): can't BGSAVE right now. "
    b"Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.")
REWRITE_IN_PROGRESS = b"ERR Background append only file rewriting already in progress"
# Redis rewrites a file nobody appends to; with nothing to append to we only say so.
REWRITE_NEEDS_AOF = b"ERR Background append only file rewriting needs appendonly yes"
NO_SHUTDOWN = b"ERR No shutdown in progress."
SHUTDOWN_FAILED = b"ERR Errors trying to SHUTDOWN. Check logs."
MISCONF_RDB = (
    b"MISCONF Redis is configured to save RDB snapshots, but it's currently "
    b"unable to persist to disk. Commands that may modify the data set are "
    b"disabled, because this instance is configured to report errors during "
    b"writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). "
    b"Please check the Redis logs for details about the RDB error.")


def misconf_aof(reason: str) -> bytes:
    return b"MISCONF Errors writing to the AOF file: %s" % reason.encode()


# --- cluster (cluster.c) --------------------------------------------------------------------
CLUSTER_DISABLED = b"ERR This instance has cluster support disabled"
INVALID_SLOT = b"ERR Invalid slot"
INVALID_SLOT_OR_COUNT = b"ERR Invalid slot or number of keys"
CROSSSLOT = b"CROSSSLOT Keys in request don't hash to the same slot"
SLOT_NOT_SERVED = b"CLUSTERDOWN Hash slot not served"
CLUSTERDOWN = b"CLUSTERDOWN The cluster is down"


def moved(slot: int, host: str, port: int) -> bytes:
    return b"MOVED %d %s:%d" % (slot, host.encode(), port)


# --- XREAD / XREADGROUP (t_stream.c xreadCommand) --------------------------------------------
GROUP_ONLY_XREADGROUP = (
    b"ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
NOACK_ONLY_XREADGROUP = (
    b"ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
MISSING_GROUP = b"ERR Missing GROUP option for XREADGROUP"
DOLLAR_IN_XREADGROUP = (
    b"ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history "
    b"of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ "
    b"ID would just return an empty result set.")
# 7.4 added `+` (the last entry) to XREAD; its XREADGROUP refusal mirrors the `$` one.
PLUS_IN_XREADGROUP = (
    b"ERR The + ID is meaningless in the context of XREADGROUP: you want to read the history "
    b"of this consumer by specifying a proper ID, or use the > ID to get new messages. The + "
    b"ID would just return an empty result set.")
PLUS_ON_ZERO = b"ERR the stream last element ID is 0-0"
GT_IN_XREAD = (
    b"ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> "
    b"<consumer> option.")
TIMEOUT_OUT_OF_RANGE = b"ERR timeout is out of range"


def unbalanced_streams(xreadgroup: bool) -> bytes:
    return (b"ERR Unbalanced '%s' list of streams: for each stream key an ID or '%s' must be "
            b"specified." % ((b"xreadgroup", b">") if xreadgroup else (b"xread", b"$")))


def nogroup_xreadgroup(key: bytes, group: bytes) -> bytes:
    return (b"NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option"
            % (key, group))


def nogroup_key(reply: bytes) -> bytes | None:
    """The key an XREADGROUP NOGROUP error reply names (the router orders shards' errors by
    it); None for any other reply."""
    head = b"-NOGROUP No such key '"
    if not reply.startswith(head):
        return None
    end = reply.rfind(b"' or consumer group '")
    return reply[len(head):end] if end >= len(head) else None


# --- consumer groups (t_stream.c xgroupCommand, xclaimCommand, xautoclaimCommand) ------------
BUSYGROUP = b"BUSYGROUP Consumer Group name already exists"
XGROUP_NO_KEY = (
    b"ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
    b"to use the MKSTREAM option to create an empty stream automatically.")
ENTRIESREAD_NEGATIVE = b"ERR value for ENTRIESREAD must be positive or -1"
XCLAIM_MIN_IDLE = b"ERR Invalid min-idle-time argument for XCLAIM"
XCLAIM_IDLE = b"ERR Invalid IDLE option argument for XCLAIM"
XCLAIM_TIME = b"ERR Invalid TIME option argument for XCLAIM"
XCLAIM_RETRYCOUNT = b"ERR Invalid RETRYCOUNT option argument for XCLAIM"
XAUTOCLAIM_MIN_IDLE = b"ERR Invalid min-idle-time argument for XAUTOCLAIM"
XAUTOCLAIM_COUNT = b"ERR COUNT must be > 0"
XAUTOCLAIM_COUNT_TOO_HIGH = (
    b"ERR Insufficient memory, failed allocating transient memory, COUNT too high.")

# Redis 8.2-8.8 stream commands (XDELEX, XACKDEL, XREADGROUP CLAIM, XNACK). No server here has
# them, so these texts follow the Redis 7 family's wording, not a byte-checked reply.
NUMIDS_POSITIVE = b"ERR Number of IDs must be a positive integer"
NUMIDS_MISMATCH = b"ERR The `numids` parameter must match the number of arguments"
CLAIM_ONLY_XREADGROUP = b"ERR The CLAIM option is only supported by XREADGROUP"
CLAIM_MIN_IDLE = b"ERR Invalid min-idle-time argument for CLAIM"
XNACK_MODE = b"ERR XNACK mode must be one of SILENT, FAIL or FATAL"
XNACK_RETRYCOUNT = b"ERR Invalid RETRYCOUNT option argument for XNACK"


def xnack_unknown_option(opt: bytes) -> bytes:
    return b"ERR Unrecognized XNACK option '%s'" % opt


def xclaim_unknown_option(opt: bytes) -> bytes:
    return b"ERR Unrecognized XCLAIM option '%s'" % opt


def subcommand_syntax(sub: bytes, cmd: bytes) -> bytes:
    """server.c addReplySubcommandSyntaxError."""
    return (b"ERR unknown subcommand or wrong number of arguments for '%s'. Try %s HELP."
            % (sub[:128], cmd.upper()))


def nogroup_key_or_group(key: bytes, group: bytes) -> bytes:
    return b"NOGROUP No such key '%s' or consumer group '%s'" % (key, group)


def nogroup_for_key(group: bytes, key: bytes) -> bytes:
    return b"NOGROUP No such consumer group '%s' for key name '%s'" % (group, key)


# --- replication (node/replication/, node/commands/replication.py) ---------------------------
COMMAND_IN_MULTI = b"ERR Command not allowed inside a transaction"
NOREPLICAS = b"NOREPLICAS Not enough good replicas to write."
OOM = b"OOM command not allowed when used memory > 'maxmemory'."
WAIT_ON_REPLICA = (
    b"ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if "
    b"a replica is configured to be writable (which is not the default) writes to replicas "
    b"are just local and are not propagated.")
INVALID_MASTER_PORT = b"ERR Invalid master port"
NOMASTERLINK = b"NOMASTERLINK Can't SYNC while not connected with my master"
UNBLOCKED_ROLE_CHANGE = (
    b"UNBLOCKED force unblock from blocking operation, instance state changed "
    b"(master -> replica?)")


def replconf_unrecognized(option: bytes) -> bytes:
    return b"ERR Unrecognized REPLCONF option: %s" % option


# --- router (router/): what a proxy in front of the shards answers itself ---------------------
# It also answers CLUSTERDOWN, SLOT_NOT_SERVED, CROSSSLOT and INVALID_CURSOR above.
MONITOR_DENY_BLOCKING = b"ERR MONITOR isn't allowed for DENY BLOCKING client"
SLOWLOG_COUNT = b"ERR count should be greater than or equal to -1"
NOT_THROUGH_ROUTER = b"ERR '%s' is not supported through a router; send it to a node"
EXECABORT_NODE_GONE = b"EXECABORT Transaction discarded because the node went away"


# --- DUMP / RESTORE / MIGRATE (cluster.c) and slot moves --------------------------------------
BUSYKEY = b"BUSYKEY Target key name already exists."
DUMP_PAYLOAD_WRONG = b"ERR DUMP payload version or checksum are wrong"
BAD_DATA_FORMAT = b"ERR Bad data format"
INVALID_TTL = b"ERR Invalid TTL value, must be >= 0"
INVALID_IDLETIME = b"ERR Invalid IDLETIME value, must be >= 0"
INVALID_FREQ = b"ERR Invalid FREQ value, must be >= 0 and <= 255"
MIGRATE_KEYS_WITH_KEY = (b"ERR When using MIGRATE KEYS option, the key argument must be set "
                         b"to the empty string")
MIGRATE_IN_EXEC = b"ERR MIGRATE cannot run inside MULTI/EXEC on xshard (it waits on the network)"
IOERR_CONNECT = b"IOERR error or timeout connecting to the client"
IOERR_WRITE = b"IOERR error or timeout writing to target instance"
IOERR_READ = b"IOERR error or timeout reading to target instance"


SLOT_RESTORE_NOT_IMPORTING = (b"ERR XSHARD.RESTORE is a slot move's own command: only a connection "
                              b"that sent CLUSTER SETSLOT <slot> IMPORTING for the key's slot may "
                              b"send it")
SLOT_RESTORE_NO_HEAD = b"ERR XSHARD.RESTORE BLOCKS needs a stream made by XSHARD.RESTORE HEAD"


def restore_unsupported(kind: str) -> bytes:
    """A well-formed payload of a type xshard does not store (hashes, sorted sets, ...)."""
    return b"ERR Bad data format: xshard does not store %s values" % kind.encode()


def target_error(message: bytes) -> bytes:
    return b"ERR Target instance replied with error: %s" % message


TRYAGAIN = b"TRYAGAIN Multiple keys request during rehashing of slot"

# CLUSTER SETSLOT (cluster_legacy.c clusterCommandSetSlot)
SETSLOT_BAD_SLOT = b"ERR Invalid or out of range slot"
SETSLOT_SYNTAX = b"ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"


def setslot_unknown_node(node: bytes) -> bytes:
    return b"ERR I don't know about node %s" % node


def setslot_not_owner(slot: int) -> bytes:
    return b"ERR I'm not the owner of hash slot %d" % slot


def setslot_already_owner(slot: int) -> bytes:
    return b"ERR I'm already the owner of hash slot %d" % slot


def setslot_claim_failed(slot: int, why: str) -> bytes:
    """CLUSTER SETSLOT NODE by hand on the importing node, when etcd's slot map could not
    be given the new owner (xshard only: the slot map lives in etcd)."""
    return (b"ERR hash slot %d: the new owner could not be recorded in etcd (%s); the slot "
            b"stays with its owner" % (slot, why.encode()))


def setslot_still_has_keys(slot: int) -> bytes:
    return (b"ERR Can't assign hashslot %d to a different node while I still hold keys for "
            b"this hash slot." % slot)


# --- error replies read from other servers (node/link.py) -------------------------------------
class ResponseError(Exception):
    """An error reply from another server. `message` is its text without the leading '-'
    (b"ERR syntax error"), `code` its first word; str() gives the text."""

    def __init__(self, message: bytes | str) -> None:
        if isinstance(message, str):
            message = message.encode(errors="replace")
        super().__init__(message.decode(errors="replace"))
        self.message = message
        self.code = error_code(error(message)) or b""


class RedirectError(ResponseError):
    """-MOVED or -ASK: `slot` is served at `host`:`port` (host "" means the server's own)."""

    def __init__(self, message: bytes | str) -> None:
        super().__init__(message)
        r = parse_redirect(error(self.message))
        self.slot, self.host, self.port = (r[1], r[2], r[3]) if r is not None else (-1, "", 0)


class MovedError(RedirectError):
    """-MOVED: the slot has another owner now."""


class AskError(RedirectError):
    """-ASK: this one command goes to the slot's importing node."""


class ClusterDownError(ResponseError):
    """-CLUSTERDOWN: the slot is served by nobody, or the cluster is down."""


class TryAgainError(ResponseError):
    """-TRYAGAIN: the keys are split by a slot move in progress."""


class CrossSlotError(ResponseError):
    """-CROSSSLOT: the keys are in different slots."""


class ReadOnlyError(ResponseError):
    """-READONLY: a write sent to a replica."""


class AuthError(ResponseError):
    """The connection is not logged in: no password given, or a wrong one."""


class NoAuthError(AuthError):
    """-NOAUTH: the server wants AUTH first."""


class WrongPassError(AuthError):
    """-WRONGPASS: no such user, a wrong password, or a disabled user."""


class NoPermError(ResponseError):
    """-NOPERM: the user may not run this command or touch this key."""


class WrongTypeError(ResponseError):
    """-WRONGTYPE: the key holds another kind of value."""


class BusyKeyError(ResponseError):
    """-BUSYKEY: RESTORE without REPLACE onto a key that exists."""


class BusyGroupError(ResponseError):
    """-BUSYGROUP: the consumer group exists already."""


class NoGroupError(ResponseError):
    """-NOGROUP: no such key or consumer group."""


class ExecAbortError(ResponseError):
    """-EXECABORT: the transaction was discarded."""


class NoReplicasError(ResponseError):
    """-NOREPLICAS: min-replicas-to-write is not met."""


class MasterDownError(ResponseError):
    """-MASTERDOWN or -NOMASTERLINK: a replica without its primary."""


class LoadingError(ResponseError):
    """-LOADING: the server is loading its data set."""


class OutOfMemoryError(ResponseError):
    """-OOM: used memory is over maxmemory."""


class MisconfError(ResponseError):
    """-MISCONF: the server cannot persist, so it takes no writes."""


class UnblockedError(ResponseError):
    """-UNBLOCKED: a blocked command released by CLIENT UNBLOCK or a role change."""


EXCEPTION_CLASSES: dict[bytes, type[ResponseError]] = {
    b"MOVED": MovedError,
    b"ASK": AskError,
    b"CLUSTERDOWN": ClusterDownError,
    b"TRYAGAIN": TryAgainError,
    b"CROSSSLOT": CrossSlotError,
    b"READONLY": ReadOnlyError,
    b"NOAUTH": NoAuthError,
    b"WRONGPASS": WrongPassError,
    b"NOPERM": NoPermError,
    b"WRONGTYPE": WrongTypeError,
    b"BUSYKEY": BusyKeyError,
    b"BUSYGROUP": BusyGroupError,
    b"NOGROUP": NoGroupError,
    b"EXECABORT": ExecAbortError,
    b"NOREPLICAS": NoReplicasError,
    b"MASTERDOWN": MasterDownError,
    b"NOMASTERLINK": MasterDownError,
    b"LOADING": LoadingError,
    b"OOM": OutOfMemoryError,
    b"MISCONF": MisconfError,
    b"UNBLOCKED": UnblockedError,
}


def parse_error(reply: bytes) -> ResponseError | None:
    """The exception for an error reply (`-CODE text\\r\\n`) by its code (ResponseError for a
    code the table does not name); None when `reply` is not an error reply."""
    code = error_code(reply)
    if code is None:
        return None
    return EXCEPTION_CLASSES.get(code, ResponseError)(reply[1:-2])


def reply_error(message: str) -> ResponseError:
    """hiredis.Reader's `replyError`: the text of an error reply (no '-', no CRLF) to its
    exception, through the same table."""
    raw = message.encode(errors="replace")
    return EXCEPTION_CLASSES.get(error_code(error(raw)) or b"", ResponseError)(raw)
