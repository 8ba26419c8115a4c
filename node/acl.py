"""ACL users: who may run which commands on which keys (Redis 7.2+ ACL, the subset apps use).

One `Acl` per process (node or router) keeps the users, authenticates clients and checks each
command. A client points at its user through `Client.acl`, which is None while the user may
run everything on every key (the `default` user as shipped: on, nopass, ~*, +@all): the
dispatch check is then a single attribute test, so ACLs cost nothing until a restricted user
exists. Whenever a user changes, the clients logged in as it are re-pointed (`rebind`).

Rules are Redis's: on/off, >pass, <pass, #sha256, !sha256, nopass, resetpass, ~pat, %R~pat,
%W~pat, %RW~pat, allkeys, resetkeys, &pat, allchannels, resetchannels, +@all/-@all
(allcommands/nocommands), +@cat/-@cat with the categories of the command table's
`acl_categories`, +cmd/-cmd and +cmd|sub/-cmd|sub, reset. A user's command rules are kept as
written (an earlier rule for the same name is dropped), as Redis 7.2+ describes them.
Selectors `(...)` and first-argument rules (`+select|0`) are not supported.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from node import command_table, errors
from node.patterns import stringmatch
from node.resp import ReplyError

if TYPE_CHECKING:
    from node.client import Client

__all__ = ["Acl", "User", "parse_users", "CATEGORIES", "category_commands", "READ", "WRITE"]

# ACLCommandCategories, in Redis's order (ACL CAT lists them so).
CATEGORIES: tuple[str, ...] = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
    "connection", "transaction", "scripting",
)

READ, WRITE = 1, 2

# Every command and subcommand by fullname ("xadd", "xgroup|create"), and the members of
# each category.
_SPECS: dict[bytes, command_table.CommandSpec] = {}
for _c in command_table.TABLE.values():
    _SPECS[_c.name] = _c
    for _s in _c.subcommands.values():
        _SPECS[_s.name] = _s
ALL_COMMANDS: frozenset[bytes] = frozenset(_SPECS)
_CATEGORY: dict[str, frozenset[bytes]] = {
    cat: frozenset(n for n, s in _SPECS.items() if "@" + cat in s.acl_categories)
    for cat in CATEGORIES
}
del _c, _s


def category_commands(cat: str) -> list[bytes]:
    """ACL CAT <category>: fullnames of its commands (and subcommands)."""
    members = _CATEGORY[cat]
    return [n for n in _SPECS if n in members]


def _family(name: bytes) -> frozenset[bytes]:
    """A rule's commands: a command with all its subcommands, or one subcommand."""
    spec = _SPECS.get(name)
    if spec is None:
        raise ReplyError(errors.ACL_UNKNOWN_COMMAND)
    return frozenset((name, *(s.name for s in spec.subcommands.values())))


def _sha256(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


class User:
    """One ACL user: flags, password hashes, key patterns and allowed commands."""

    __slots__ = ("name", "enabled", "nopass", "passwords", "allcommands", "allowed", "rules",
                 "allkeys", "patterns", "allchannels", "channels", "sanitize")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: list[str] = []  # sha256 hex digests, in the order they were added
        self.allcommands = False  # +@all: also commands added later
        self.allowed: set[bytes] = set()  # fullnames this user may run
        self.rules: list[tuple[bytes, bytes]] = []  # (name, "+name"/"-name"), as written
        self.allkeys = False
        self.patterns: list[tuple[int, bytes]] = []  # (READ|WRITE, glob)
        self.allchannels = False
        self.channels: list[bytes] = []
        self.sanitize = True  # sanitize-payload: RESTORE payloads are always checked here

    @property
    def unrestricted(self) -> bool:
        """May run every command on every key: the dispatch check can be skipped."""
        return self.allcommands and self.allkeys and not self.rules

    # --- rules ----------------------------------------------------------------------------------
    def apply(self, op: bytes) -> None:
        """ACLSetUser: apply one rule; ReplyError with Redis's text if it is not valid.

        A rule is a keyword (on, nopass, allkeys, resetchannels, -@all...) or a prefix and its
        argument (>password, ~pattern, &channel, +command...): one table each, below the
        class."""
        low = op.lower()
        keyword = _KEYWORD_RULES.get(low)
        first = op[:1]
        if keyword is not None:
            keyword(self)
        elif first in _PREFIX_RULES and (len(op) > 1 or first not in (b"+", b"-")):
            _PREFIX_RULES[first](self, op)
        elif first == b"(":
            raise ReplyError(errors.ACL_SELECTORS_UNSUPPORTED)
        else:
            raise ReplyError(errors.ACL_SYNTAX)

    def _set_flag(self, attr: str, on: bool) -> None:
        """on/off (enabled), sanitize-payload/skip-sanitize-payload (sanitize)."""
        setattr(self, attr, on)

    def _no_password(self, on: bool) -> None:
        """nopass: any password logs in; resetpass: none does (until one is added)."""
        self.nopass = on
        self.passwords = []

    def _all_keys(self, on: bool) -> None:
        """allkeys (~*) or resetkeys."""
        self.allkeys = on
        self.patterns = [(READ | WRITE, b"*")] if on else []

    def _all_channels(self, on: bool) -> None:
        """allchannels (&*) or resetchannels."""
        self.allchannels = on
        self.channels = [b"*"] if on else []

    def _all_commands(self, on: bool) -> None:
        """allcommands (+@all) or nocommands (-@all): also the rules written so far go."""
        self.allcommands = on
        self.allowed = set(ALL_COMMANDS) if on else set()
        self.rules = []

    def _reset(self) -> None:
        for o in (b"resetpass", b"resetkeys", b"resetchannels", b"off", b"-@all",
                  b"sanitize-payload"):
            self.apply(o)

    def _password_of(self, op: bytes) -> str:
        """The hash a password rule names: >password and <password hash it, #hash and !hash
        give it."""
        return _sha256(op[1:]) if op[:1] in (b">", b"<") else self._hash(op[1:])

    def _add_password(self, op: bytes) -> None:
        h = self._password_of(op)
        if h not in self.passwords:
            self.passwords.append(h)
        self.nopass = False

    def _remove_password(self, op: bytes) -> None:
        h = self._password_of(op)
        if h not in self.passwords:
            raise ReplyError(errors.ACL_NO_SUCH_PASSWORD)
        self.passwords.remove(h)

    def _channel_pattern(self, op: bytes) -> None:
        if self.allchannels:
            raise ReplyError(errors.ACL_CHANNEL_AFTER_ALL)
        if op[1:] not in self.channels:
            self.channels.append(op[1:])

    def _command_op(self, op: bytes) -> None:
        """+name, -name, +@category, -@category (a subcommand as name|sub)."""
        self._command_rule(op[:1] == b"+", op[1:].lower())

    @staticmethod
    def _hash(h: bytes) -> str:
        if len(h) != 64 or any(ch not in b"0123456789abcdef" for ch in h):
            raise ReplyError(errors.ACL_BAD_HASH)
        return h.decode()

    def _key_pattern(self, op: bytes) -> None:
        if op[:1] == b"~":
            flags, pat = READ | WRITE, op[1:]
        else:
            tilde = op.find(b"~")
            if tilde < 2:
                raise ReplyError(errors.ACL_SYNTAX)
            flags = 0
            for ch in op[1:tilde].upper():
                if ch == ord("R"):
                    flags |= READ
                elif ch == ord("W"):
                    flags |= WRITE
                else:
                    raise ReplyError(errors.ACL_SYNTAX)
            pat = op[tilde + 1:]
        if self.allkeys:
            raise ReplyError(errors.ACL_KEY_AFTER_ALL)
        if flags == READ | WRITE and pat == b"*":
            self.apply(b"allkeys")
            return
        for i, (f, p) in enumerate(self.patterns):
            if p == pat:  # one entry per pattern; the permissions add up
                self.patterns[i] = (f | flags, p)
                return
        self.patterns.append((flags, pat))

    def _command_rule(self, allow: bool, name: bytes) -> None:
        if name[:1] == b"@":
            cat = name[1:].decode("latin-1")
            if cat not in _CATEGORY:
                raise ReplyError(errors.ACL_UNKNOWN_COMMAND)
            names = _CATEGORY[cat]
        else:
            names = _family(name)
        if allow:
            self.allowed |= names
        else:
            self.allowed -= names
        self.rules = [r for r in self.rules if r[0] != name]
        self.rules.append((name, (b"+" if allow else b"-") + name))

    # --- descriptions ---------------------------------------------------------------------------
    def flag_words(self) -> list[bytes]:
        words = [b"on" if self.enabled else b"off"]
        if self.nopass:
            words.append(b"nopass")
        words.append(b"sanitize-payload" if self.sanitize else b"skip-sanitize-payload")
        return words

    def commands_text(self) -> bytes:
        return b" ".join([b"+@all" if self.allcommands else b"-@all"] + [r[1] for r in self.rules])

    def keys_text(self) -> bytes:
        if self.allkeys:
            return b"~*"
        return b" ".join(b"%s~%s" % (_PERM[f], p) for f, p in self.patterns)

    def channels_text(self) -> bytes:
        if self.allchannels:
            return b"&*"
        return b" ".join(b"&" + c for c in self.channels)

    def describe(self) -> bytes:
        """ACL LIST's line (also the aclfile's): 'user NAME on #hash ~keys &ch +@all ...'."""
        parts = [b"user", self.name, *self.flag_words()]
        parts += [b"#" + h.encode() for h in self.passwords]
        if self.keys_text():
            parts.append(self.keys_text())
        parts.append(self.channels_text() or b"resetchannels")
        parts.append(self.commands_text())
        return b" ".join(parts)

    # --- checks -----------------------------------------------------------------------------------
    def check_password(self, password: bytes) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        h = _sha256(password)
        return any(hmac.compare_digest(h, p) for p in self.passwords)

    def denied(self, argv: list[bytes], name: bytes) -> tuple[bytes, bytes] | None:
        """(reason, object) of an ACL LOG entry if this user may not run argv, else None."""
        full = command_table.stat_name(argv, name) or name
        if full not in self.allowed and name not in command_table.NO_AUTH:
            return b"command", full  # AUTH, HELLO, ... are always allowed, as in Redis
        if not self.allkeys:
            refs = command_table.get_keys_and_flags(argv) or ()
            for pos, flags in refs:
                need = (READ if "access" in flags else 0) | (
                    WRITE if ("insert" in flags or "delete" in flags or "update" in flags)
                    else 0)
                key = argv[pos]
                if not any((f & need) == need and stringmatch(p, key)
                           for f, p in self.patterns):
                    return b"key", key
        return None


_PERM = {READ: b"%R", WRITE: b"%W", READ | WRITE: b""}



# ACLSetUser's rules (User.apply). A keyword turns a toggle on or off (each toggle's spellings
# of both below), or is `reset`; a prefixed rule is found by its first byte.
_TOGGLES: tuple[tuple[Callable[..., None], tuple[bytes, ...], tuple[bytes, ...]], ...] = (
    (partial(User._set_flag, attr="enabled"), (b"on",), (b"off",)),
    (partial(User._set_flag, attr="sanitize"), (b"sanitize-payload",),
     (b"skip-sanitize-payload",)),
    (User._no_password, (b"nopass",), (b"resetpass",)),
    (User._all_keys, (b"allkeys", b"~*"), (b"resetkeys",)),
    (User._all_channels, (b"allchannels", b"&*"), (b"resetchannels",)),
    (User._all_commands, (b"allcommands", b"+@all"), (b"nocommands", b"-@all")),
)
_KEYWORD_RULES: dict[bytes, Callable[[User], None]] = {b"reset": User._reset}
for _toggle, _on, _off in _TOGGLES:
    _KEYWORD_RULES.update({w: partial(_toggle, on=True) for w in _on})
    _KEYWORD_RULES.update({w: partial(_toggle, on=False) for w in _off})
del _toggle, _on, _off
_PREFIX_RULES: dict[bytes, Callable[[User, bytes], None]] = {
    b">": User._add_password, b"#": User._add_password,
    b"<": User._remove_password, b"!": User._remove_password,
    b"~": User._key_pattern, b"%": User._key_pattern,
    b"&": User._channel_pattern,
    b"+": User._command_op, b"-": User._command_op,
}


class LogEntry:
    __slots__ = ("count", "reason", "context", "object", "username", "created", "updated",
                 "client_info", "entry_id")


class Acl:
    """The users of one process, the ACL LOG, and the aclfile."""

    def __init__(self, clients: dict[int, Client] | None = None, log_max: int = 128) -> None:
        self.users: dict[bytes, User] = {}
        self.clients: dict[int, Client] = clients if clients is not None else {}
        self.log: deque[LogEntry] = deque()
        self.log_max = log_max
        self.next_entry_id = 0
        self.denied_auth = 0  # INFO acl_access_denied_auth
        self.denied_cmd = 0
        self.denied_key = 0
        # Called after users changed through ACL SETUSER/DELUSER/LOAD (the router's etcd sync).
        self.on_change: Callable[[], None] | None = None
        self.client_info: Callable[[Client], bytes] = lambda c: b""
        self.users[b"default"] = _default_user()

    # --- users ----------------------------------------------------------------------------------
    def set_requirepass(self, password: str) -> None:
        """requirepass is the default user's one password, as in Redis (empty: nopass)."""
        d = self.users[b"default"]
        d.apply(b"resetpass")
        d.apply(b">" + password.encode(errors="surrogateescape") if password else b"nopass")

    def setuser(self, name: bytes, ops: Iterable[bytes]) -> None:
        """ACL SETUSER: all rules apply or none does (they are tried on a copy first)."""
        old = self.users.get(name)
        user = User(name)
        if old is not None:
            for slot in User.__slots__:
                v = getattr(old, slot)
                setattr(user, slot, v.copy() if isinstance(v, (list, set)) else v)
        for op in ops:
            try:
                user.apply(op)
            except ReplyError as e:
                raise ReplyError(errors.acl_setuser_error(op, e.message)) from None
        self.users[name] = user
        self.rebind()

    def deluser(self, names: Iterable[bytes]) -> int:
        """ACL DELUSER: the number deleted; their clients are disconnected, as in Redis."""
        n = 0
        for name in names:
            if name == b"default":
                raise ReplyError(errors.ACL_DELETE_DEFAULT)
            if self.users.pop(name, None) is not None:
                n += 1
        if n:
            self.rebind()
        return n

    def replace(self, users: dict[bytes, User]) -> None:
        """Take a whole new set of users (ACL LOAD, the router's etcd copy)."""
        if b"default" not in users:
            users[b"default"] = self.users[b"default"]
        self.users = users
        self.rebind()

    def rebind(self) -> None:
        """Point every client at its user's current rules; close those whose user is gone."""
        for c in list(self.clients.values()):
            if c.is_master:
                continue
            if c.user not in self.users:
                if c.conn is not None:
                    c.conn.close()
                continue
            c.acl = self.rules_of(c.user)

    def rules_of(self, name: bytes) -> User | None:
        """What `Client.acl` holds for a client of user `name`: None when unrestricted."""
        u = self.users.get(name)
        return None if u is None or u.unrestricted else u

    def default_needs_auth(self) -> bool:
        """Redis authRequired: a new client must AUTH unless default is on and nopass."""
        d = self.users[b"default"]
        return not (d.enabled and d.nopass)

    # --- authentication and the dispatch check -------------------------------------------------
    def authenticate(self, c: Client, name: bytes, password: bytes, command: bytes) -> bool:
        """AUTH/HELLO AUTH: log the client in as `name`, or log the failure (reason auth)."""
        u = self.users.get(name)
        if u is None or not u.check_password(password):
            self.denied_auth += 1
            self.add_log(c, b"auth", command, name)
            return False
        c.user = name
        c.acl = None if u.unrestricted else u
        c.authenticated = True
        return True

    def check(self, c: Client, argv: list[bytes], name: bytes) -> bytes | None:
        """The NOPERM error for a command c's user may not run (logged), else None."""
        u = c.acl
        if u is None:
            return None
        d = u.denied(argv, name)
        if d is None:
            return None
        reason, obj = d
        # client-info shows the denied command: node/preflight.py set c.last_cmd before this
        # check, and EXEC's re-check of its queue leaves cmd=exec, as Redis does.
        self.add_log(c, reason, obj, u.name)
        if reason == b"command":
            self.denied_cmd += 1
            return errors.noperm_command(u.name, obj)
        self.denied_key += 1
        return errors.NOPERM_KEY

    # --- ACL LOG --------------------------------------------------------------------------------
    def add_log(self, c: Client, reason: bytes, obj: bytes, username: bytes) -> None:
        """addACLLogEntry: a repeat of a recent (60 s) entry only bumps its count."""
        now = int(time.time() * 1000)
        context = b"multi" if c.in_exec else b"toplevel"
        for e in self.log:
            if (e.reason == reason and e.context == context and e.object == obj
                    and e.username == username and now - e.updated < 60000):
                e.count += 1
                e.updated = now
                e.client_info = self.client_info(c)
                self.log.remove(e)
                self.log.appendleft(e)
                return
        e = LogEntry()
        e.count, e.reason, e.context, e.object, e.username = 1, reason, context, obj, username
        e.created = e.updated = now
        e.client_info = self.client_info(c)
        e.entry_id = self.next_entry_id
        self.next_entry_id += 1
        self.log.appendleft(e)
        while len(self.log) > self.log_max:
            self.log.pop()

    # --- the aclfile -----------------------------------------------------------------------------
    def load_file(self, path: str) -> None:
        """ACLLoadFromFile: every line must be valid, or nothing changes (ReplyError)."""
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise ReplyError(errors.acl_file_error(path, str(e))) from None
        self.replace(parse_users(text, path))

    def text(self) -> bytes:
        """Every user, one ACL LIST line each: the aclfile's (and etcd's) format."""
        return b"".join(self.users[n].describe() + b"\n" for n in sorted(self.users))

    def save_file(self, path: str) -> None:
        """ACL SAVE: every user, one line each, written to a temp file then renamed."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(self.text())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def _default_user() -> User:
    d = User(b"default")
    for op in (b"on", b"nopass", b"~*", b"&*", b"+@all"):
        d.apply(op)
    return d


def parse_users(text: bytes, where: str) -> dict[bytes, User]:
    """Users from ACL LIST lines ('user NAME rules...'); ReplyError naming the bad line. A
    missing default user is the stock one, as in Redis."""
    users: dict[bytes, User] = {}
    probe = Acl()
    for lineno, raw in enumerate(text.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        words = line.split()
        if words[0] != b"user" or len(words) < 2:
            raise ReplyError(errors.acl_file_line(where, lineno, b"should start with user keyword"))
        if words[1] in users:
            raise ReplyError(errors.acl_file_line(where, lineno,
                                                  b"duplicate user '%s' found" % words[1]))
        try:
            probe.setuser(words[1], [b"reset", *words[2:]])
        except ReplyError as e:
            raise ReplyError(errors.acl_file_line(where, lineno, e.message)) from None
        users[words[1]] = probe.users[words[1]]
    if b"default" not in users:
        users[b"default"] = _default_user()
    return users
