"""Every error text of the node, once, byte-identical to Redis, plus the integer parsers.

Texts are the message without the leading '-'; raise them as `ReplyError(TEXT)`. The integer
helpers follow Redis's own parsing rules (string2ll, string2ull) so that the same odd input gets
the same reply; stream IDs are parsed in node/streamid.py.
"""

from __future__ import annotations

from node.resp import ReplyError

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
SELECT_NOT_ALLOWED = b"ERR SELECT is not allowed in cluster mode"
NOPROTO = b"NOPROTO unsupported protocol version"
TIMEOUT_NEGATIVE = b"ERR timeout is negative"
TIMEOUT_NOT_INTEGER = b"ERR timeout is not an integer or out of range"
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


def parse_timeout_ms_or_error(b: bytes) -> int:
    """A BLOCK argument in milliseconds: 0 means forever."""
    v = string2ll(b)
    if v is None:
        raise ReplyError(TIMEOUT_NOT_INTEGER)
    if v < 0:
        raise ReplyError(TIMEOUT_NEGATIVE)
    return v


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
XSETID_ENTRIES_ADDED_NEGATIVE = b"ERR entries_added must be positive"
XSETID_SMALLER_THAN_MAXDEL = (
    b"ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
XSETID_SMALLER_THAN_TOP = (
    b"ERR The ID specified in XSETID is smaller than the target stream top item")
XSETID_ENTRIES_ADDED_SMALL = (
    b"ERR The entries_added specified in XSETID is smaller than the target stream length")
XSETID_SMALLER_THAN_CURRENT_MAXDEL = (
    b"ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")

# Replication (node/replication.py)
NOREPLICAS = b"NOREPLICAS Not enough good replicas to write."
WAIT_ON_REPLICA = (
    b"ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if "
    b"a replica is configured to be writable (which is not the default) writes to replicas "
    b"are just local and are not propagated.")
INVALID_MASTER_PORT = b"ERR Invalid master port"
NOMASTERLINK = b"NOMASTERLINK Can't SYNC while not connected with my master"
UNBLOCKED_ROLE_CHANGE = (
    b"UNBLOCKED force unblock from blocking operation, instance state changed "
    b"(master -> replica?)")
