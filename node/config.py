"""Node settings: one table that serves the command line, redis.conf files and CONFIG GET/SET.

Names and value syntax follow redis.conf (`stream-node-max-entries 100`, `proto-max-bulk-len 512mb`,
`appendonly yes`), so a user's existing habits and files work.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from node import errors
from node.patterns import stringmatch

_UNITS = {b"k": 1000, b"kb": 1024, b"m": 1000**2, b"mb": 1024**2, b"g": 1000**3, b"gb": 1024**3}


class ConfigError(ValueError):
    """A bad value; the message is Redis's reason text (after 'argument ... - ')."""


def parse_memory(v: bytes) -> int:
    """Redis memtoull: a number with an optional k/kb/m/mb/g/gb suffix (case-insensitive)."""
    s = v.strip().lower()
    for suffix in (b"kb", b"mb", b"gb", b"k", b"m", b"g"):
        if s.endswith(suffix):
            num, mul = s[: -len(suffix)], _UNITS[suffix]
            break
    else:
        num, mul = s, 1
    if not num.isdigit():
        raise ConfigError(errors.CONFIG_NOT_MEMORY)
    return int(num) * mul


def _parse_int(v: bytes) -> int:
    s = v.strip()
    if not s.lstrip(b"-").isdigit():
        raise ConfigError(errors.CONFIG_NOT_INTEGER)
    return int(s)


def _parse_bool(v: bytes) -> bool:
    s = v.lower()
    if s == b"yes":
        return True
    if s == b"no":
        return False
    raise ConfigError(errors.CONFIG_NOT_BOOL)


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # int | memory | bool | str | enum | list
    default: Any
    mutable: bool = True
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    aliases: tuple[str, ...] = ()
    help: str = ""  # one line for `xshard node --help`
    # A secret's environment variable: read when neither the command line nor the config file
    # sets it, so that it need not be on argv (which `ps` and /proc/PID/cmdline show).
    env: str = ""

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    def parse(self, raw: bytes) -> Any:
        if self.kind == "int":
            v = _parse_int(raw)
        elif self.kind == "memory":
            v = parse_memory(raw)
        elif self.kind == "bool":
            return _parse_bool(raw)
        elif self.kind == "enum":
            s = raw.decode(errors="replace").lower()
            if s not in self.choices:
                raise ConfigError(errors.config_not_one_of(self.choices))
            return s
        else:
            return raw.decode(errors="surrogateescape")
        if self.minimum is not None and v < self.minimum or self.maximum is not None and v > self.maximum:
            raise ConfigError(errors.config_out_of_range(self.minimum, self.maximum))
        return v

    def render(self, v: Any) -> bytes:
        if self.kind == "bool":
            return b"yes" if v else b"no"
        if isinstance(v, int):
            return b"%d" % v
        return str(v).encode(errors="surrogateescape")

    def metavar(self) -> str:
        """The value's form in --help, as the other subcommands write it (yes/no, N, ...)."""
        return {"enum": "/".join(self.choices), "bool": "yes/no", "memory": "BYTES",
                "int": "N", "str": "VALUE"}[self.kind]

    def help_text(self) -> str:
        """The description with the default, once: a help that names its own default (e.g.
        "(default: host:port)") is not given a second one."""
        text = self.help + (f" (env {self.env})" if self.env else "")
        if "(default:" in self.help:
            return text
        shown = self.render(self.default).decode(errors="replace")
        if shown == "" or " " in shown:
            shown = repr(shown)
        return f"{text} (default: {shown})"


def help_parser(usage: str, description: str) -> argparse.ArgumentParser:
    """A parser that only prints `xshard node --help`, in the layout of every other
    subcommand; the node parses its options Redis-style (node/main.py), which argparse
    cannot (`--save 900 1 300 10`, redis.conf files, CONFIG SET)."""
    p = argparse.ArgumentParser(prog="xshard node", usage=usage, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="read options from a redis.conf-style file")
    for s in SETTINGS:
        p.add_argument(f"--{s.name}", *(f"--{a}" for a in s.aliases), metavar=s.metavar(),
                       help=s.help_text().replace("%", "%%"))
    return p


_LL = (1 << 63) - 1

SETTINGS: tuple[Setting, ...] = (
    Setting("port", "int", 6379, mutable=False, minimum=0, maximum=65535,
            help="TCP port to listen on (0: pick a free one)"),
    Setting("bind", "str", "127.0.0.1", mutable=False,
            help="addresses to listen on, space separated"),
    Setting("dir", "str", ".", mutable=False,
            help="working directory: AOF, snapshots and the log go here"),
    Setting("requirepass", "str", "", env="XSHARD_REQUIREPASS",
            help="password clients must send with AUTH (empty: none)"),
    Setting("aclfile", "str", "", mutable=False,
            help="file of ACL users, loaded at start and written by ACL SAVE (empty: none)"),
    Setting("acllog-max-len", "int", 128, minimum=0, maximum=_LL,
            help="entries kept by ACL LOG (denied commands, keys and logins)"),
    Setting("masterauth", "str", "", env="XSHARD_MASTERAUTH",
            help="password this node sends to its primary when it replicates"),
    Setting("enable-debug-command", "enum", "no", mutable=False, choices=("yes", "no", "local"),
            help="allow DEBUG: yes, no, or local (loopback clients only)"),
    Setting("stream-node-max-entries", "int", 100, minimum=0, maximum=_LL,
            help="entries per packed stream block (0: no limit)"),
    Setting("stream-node-max-bytes", "memory", 4096, minimum=0, maximum=_LL,
            help="bytes per packed stream block (0: no limit)"),
    # Redis 8.6: a stream's IDMP limits until XCFGSET sets its own (node/idmp.py).
    Setting("stream-idmp-duration", "int", 100, minimum=1, maximum=86400,
            help="seconds an idempotent XADD's producer/iid pair is remembered"),
    Setting("stream-idmp-maxsize", "int", 100, minimum=1, maximum=10000,
            help="producer/iid pairs remembered per producer"),
    Setting("proto-max-bulk-len", "memory", 512 * 1024 * 1024, minimum=1024 * 1024, maximum=_LL,
            help="largest bulk string a client may send"),
    Setting("client-query-buffer-limit", "memory", 1024 * 1024 * 1024, minimum=1024 * 1024, maximum=_LL,
            help="largest unparsed input kept for one client"),
    Setting("client-output-buffer-limit", "str",
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
            help="per class: hard limit, soft limit, soft seconds; a client over them is closed"),
    Setting("maxclients", "int", 10000, minimum=1, maximum=_LL,
            help="most clients connected at once"),
    Setting("timeout", "int", 0, minimum=0, maximum=_LL,
            help="close a client idle this many seconds (0: never)"),
    Setting("databases", "int", 1, mutable=False, minimum=1, maximum=1 << 31,
            help="accepted for redis.conf compatibility; there is one database"),
    Setting("hz", "int", 10, minimum=1, maximum=500,
            help="background tasks per second (expiry, client timeouts)"),
    Setting("loglevel", "enum", "notice", choices=("debug", "verbose", "notice", "warning", "nothing"),
            help="debug, verbose, notice, warning or nothing"),
    Setting("logfile", "str", "", mutable=False,
            help="log to this file instead of stderr"),
    Setting("daemonize", "bool", False, mutable=False,
            help="refused: run the node under a supervisor (xshard up, systemd, Kubernetes)"),
    Setting("maxmemory", "memory", 0, minimum=0, maximum=_LL,
            help="over this RSS, commands that add data get -OOM (noeviction); 0: no limit"),
    Setting("maxmemory-policy", "enum", "noeviction", choices=("noeviction",),
            help="what happens over maxmemory: noeviction (writes that add data are refused; "
                 "a stream store evicts nothing)"),
    Setting("save", "str", "",
            help="snapshot rules: pairs of seconds and changes (empty: no automatic snapshots)"),
    Setting("appendonly", "bool", False,
            help="keep an append-only file of every change"),
    Setting("appendfsync", "enum", "everysec", choices=("always", "everysec", "no"),
            help="when the AOF is fsynced: always, everysec or no"),
    Setting("appendfilename", "str", "appendonly.aof", mutable=False,
            help="base name of the AOF files"),
    Setting("appenddirname", "str", "appendonlydir", mutable=False,
            help="directory (under dir) that holds the AOF files and their manifest"),
    Setting("auto-aof-rewrite-percentage", "int", 100, minimum=0, maximum=(1 << 31) - 1,
            help="rewrite the AOF when it grew by this percent since the last rewrite (0: never)"),
    Setting("auto-aof-rewrite-min-size", "memory", 64 * 1024 * 1024, minimum=0, maximum=_LL,
            help="do not rewrite an AOF smaller than this"),
    Setting("stop-writes-on-bgsave-error", "bool", True,
            help="refuse writes (MISCONF) while the last snapshot failed"),
    # Not Redis's RDB format, so not Redis's file name: redis tools must not mistake it.
    Setting("dbfilename", "str", "dump.xsnap",
            help="snapshot file name (xshard's own format, not RDB)"),
    Setting("cluster-enabled", "bool", False, mutable=False,
            help="accepted for redis.conf compatibility; cluster mode comes from --etcd"),
    # Cluster membership through etcd (node/membership/agent.py); without --etcd the node is standalone.
    Setting("etcd", "str", "", mutable=False,
            help="etcd endpoints (comma list) of the cluster to join; empty: a standalone node"),
    Setting("etcd-user", "str", "", mutable=False,
            help="etcd user name, when etcd has auth enabled"),
    Setting("etcd-password", "str", "", mutable=False,
            help="password of etcd-user (better: the XSHARD_ETCD_PASSWORD environment variable)"),
    Setting("etcd-cacert", "str", "", mutable=False,
            help="CA bundle that signed etcd's server certificate (implies TLS to etcd)"),
    Setting("etcd-cert", "str", "", mutable=False,
            help="client certificate for etcd (mutual TLS)"),
    Setting("etcd-key", "str", "", mutable=False, help="private key of etcd-cert"),
    Setting("cluster", "str", "xshard", mutable=False,
            help="cluster name in etcd (key prefix /xshard/NAME/)"),
    Setting("shard", "str", "0", mutable=False,
            help="shard this node belongs to"),
    Setting("node-id", "str", "", mutable=False,
            help="node id in etcd (default: host:port)"),
    Setting("announce-host", "str", "", mutable=False,
            help="address other nodes and clients reach this node at (default: the first bind address)"),
    Setting("tcp-backlog", "int", 511, mutable=False, minimum=0, maximum=_LL,
            help="listen() backlog"),
    # TLS (node/tls.py), Redis's names and meanings. CONFIG SET of any but tls-port reloads
    # the certificates for the next handshakes (node/tls.py reload).
    Setting("tls-port", "int", 0, mutable=False, minimum=0, maximum=65535,
            help="TLS port to listen on, besides --port (0: none; with --port 0, TLS only)"),
    Setting("tls-cert-file", "str", "",
            help="server certificate (PEM), also the client one for outgoing TLS links"),
    Setting("tls-key-file", "str", "", help="private key of tls-cert-file"),
    Setting("tls-key-file-pass", "str", "", env="XSHARD_TLS_KEY_FILE_PASS",
            help="passphrase of tls-key-file, if it is encrypted"),
    Setting("tls-client-cert-file", "str", "",
            help="client certificate for outgoing TLS links (default: tls-cert-file)"),
    Setting("tls-client-key-file", "str", "",
            help="private key of tls-client-cert-file"),
    Setting("tls-client-key-file-pass", "str", "", env="XSHARD_TLS_CLIENT_KEY_FILE_PASS",
            help="passphrase of tls-client-key-file"),
    Setting("tls-ca-cert-file", "str", "",
            help="CA bundle that client and peer certificates must chain to"),
    Setting("tls-ca-cert-dir", "str", "",
            help="directory of CA certificates (c_rehash layout), with or instead of the file"),
    Setting("tls-auth-clients", "enum", "yes", choices=("yes", "no", "optional"),
            help="TLS clients must present a certificate: yes, no, or optional (checked if sent)"),
    Setting("tls-replication", "bool", False,
            help="a replica connects to its primary's TLS port over TLS"),
    Setting("tls-cluster", "bool", False,
            help="MIGRATE and slot moves reach other nodes at their TLS port (no cluster bus: etcd)"),
    Setting("tls-protocols", "str", "",
            help='TLS versions, e.g. "TLSv1.2 TLSv1.3" (empty: both)'),
    Setting("tls-ciphers", "str", "",
            help="OpenSSL cipher list for TLSv1.2 (empty: OpenSSL's default)"),
    Setting("tls-ciphersuites", "str", "",
            help="accepted for redis.conf compatibility; TLSv1.3 uses OpenSSL's suites"),
    Setting("tls-prefer-server-ciphers", "bool", False,
            help="pick the cipher by the server's order of preference, not the client's"),
    Setting("tls-dh-params-file", "str", "",
            help="DH parameters (PEM) for DHE ciphers (empty: none)"),
    Setting("tls-session-caching", "bool", True,
            help="resume TLS sessions (no: session tickets are off)"),
    Setting("tls-session-cache-size", "int", 20480, minimum=0, maximum=(1 << 31) - 1,
            help="accepted for redis.conf compatibility; OpenSSL's default cache applies"),
    Setting("tls-session-cache-timeout", "int", 300, minimum=0, maximum=(1 << 31) - 1,
            help="accepted for redis.conf compatibility; OpenSSL's default timeout applies"),
    Setting("tcp-keepalive", "int", 300, minimum=0, maximum=_LL,
            help="accepted for redis.conf compatibility; not applied"),
    Setting("protected-mode", "bool", False,
            help="accepted for redis.conf compatibility"),
    Setting("lua-time-limit", "int", 5000, aliases=("busy-reply-threshold",),
            help="accepted for redis.conf compatibility; there are no scripts"),
    # Replication (node/replication/). `replicaof` reflects the current primary ("host
    # port", "" for none); it is set at start-up or with the REPLICAOF command.
    Setting("replicaof", "str", "", mutable=False, aliases=("slaveof",),
            help='host and port of the primary to replicate from, as "host port" (empty: none)'),
    Setting("masteruser", "str", "",
            help="user name sent with masterauth"),
    Setting("repl-backlog-size", "memory", 1024 * 1024, minimum=1, maximum=_LL,
            help="bytes of recent changes kept for partial resyncs of replicas"),
    Setting("repl-backlog-ttl", "int", 3600, minimum=0, maximum=(1 << 31) - 1,
            help="seconds without replicas after which a primary frees its backlog (0: never)"),
    Setting("repl-timeout", "int", 60, minimum=1, maximum=(1 << 31) - 1,
            help="seconds without traffic before a replication link is considered dead"),
    Setting("repl-ping-replica-period", "int", 10, minimum=1, maximum=(1 << 31) - 1,
            aliases=("repl-ping-slave-period",),
            help="seconds between pings from the primary to its replicas"),
    Setting("min-replicas-to-write", "int", 0, minimum=0, maximum=(1 << 31) - 1,
            aliases=("min-slaves-to-write",),
            help="refuse writes (NOREPLICAS) with fewer good replicas than this (0: off)"),
    Setting("min-replicas-max-lag", "int", 10, minimum=0, maximum=(1 << 31) - 1,
            aliases=("min-slaves-max-lag",),
            help="seconds of lag within which a replica counts as good"),
    Setting("replica-read-only", "bool", True, aliases=("slave-read-only",),
            help="replicas refuse writes from clients"),
    Setting("replica-announce-ip", "str", "", aliases=("slave-announce-ip",),
            help="address this replica reports to its primary"),
    Setting("replica-announce-port", "int", 0, minimum=0, maximum=65535,
            aliases=("slave-announce-port",),
            help="port this replica reports to its primary (0: the real one)"),
    Setting("replica-priority", "int", 100, minimum=0, maximum=(1 << 31) - 1,
            aliases=("slave-priority",),
            help="reported in INFO; failover goes by replication offset, not priority"),
    # Redis's own introspection (node/slowlog.py, node/latency.py).
    Setting("slowlog-log-slower-than", "int", 10000, minimum=-1, maximum=_LL,
            help="SLOWLOG keeps commands that ran this many microseconds or longer (-1: none)"),
    Setting("slowlog-max-len", "int", 128, minimum=0, maximum=_LL,
            help="most SLOWLOG entries kept"),
    Setting("latency-monitor-threshold", "int", 0, minimum=0, maximum=_LL,
            help="LATENCY samples events that took this many milliseconds or longer (0: off)"),
    # Prometheus metrics (node/metrics.py, node/metricsserver.py).
    Setting("metrics-port", "int", 0, mutable=False, minimum=0, maximum=65535,
            help="serve /metrics, /healthz and /readyz over HTTP on this port (0: off)"),
    Setting("metrics-streams", "str", "*",
            help="glob of the stream names that get per-stream metrics (a partition "
                 "key matches by its logical name)"),
    Setting("metrics-max-streams", "int", 1000, minimum=0, maximum=_LL,
            help="most streams with per-stream metrics (each adds series per group); "
                 "partition keys come first"),
    Setting("metrics-consumers", "bool", False,
            help="also export each consumer's idle time (one series per consumer)"),
    # Full syncs always go through a snapshot file (disk-based, like repl-diskless-sync no).
    Setting("repl-diskless-sync", "bool", False,
            help="accepted for redis.conf compatibility; full syncs use a snapshot file"),
)

BY_NAME: dict[str, Setting] = {}
for _s in SETTINGS:
    BY_NAME[_s.name] = _s
    for _a in _s.aliases:
        BY_NAME[_a] = _s


def apply_environment(config: Config, given: set[str],
                      environ: Mapping[str, str] | None = None) -> None:
    """Set each secret that `given` (the settings the command line and the config file set)
    lacks from its environment variable, when that is set; raises ConfigError naming it."""
    environ = os.environ if environ is None else environ
    for s in SETTINGS:
        if s.env and s.name not in given and s.env in environ:
            try:
                config.apply(s.name, environ[s.env].encode(errors="surrogateescape"),
                             startup=True)
            except ConfigError as e:
                raise ConfigError(f"{s.env}: {e}") from None


class Config:
    """Current values as attributes (`config.stream_node_max_entries`)."""

    def __init__(self) -> None:
        for s in SETTINGS:
            setattr(self, s.attr, s.default)

    if TYPE_CHECKING:  # the attributes come from SETTINGS, one per setting
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def apply(self, name: str, raw: bytes, startup: bool = False) -> None:
        """Set one value from its text form; raises KeyError (unknown) or ConfigError."""
        s = BY_NAME[name.lower()]
        if not startup and not s.mutable:
            raise ConfigError(errors.CONFIG_IMMUTABLE)
        v = s.parse(raw)
        if s.name == "client-output-buffer-limit":
            v = _merge_obuf_limits(getattr(self, s.attr), raw)
        setattr(self, s.attr, v)

    def get(self, pattern: bytes) -> list[tuple[bytes, bytes]]:
        """CONFIG GET: glob-match names (aliases too), as Redis does."""
        out = []
        seen = set()
        for name, s in BY_NAME.items():
            if name in seen or not stringmatch(pattern, name.encode(), nocase=True):
                continue
            seen.add(name)
            out.append((name.encode(), s.render(getattr(self, s.attr))))
        return out

    def obuf_over_limit(self, klass: str, size: int, soft_since: float,
                        now: float) -> tuple[bool, float]:
        """client-output-buffer-limit: (over the hard limit, or over the soft one for too
        long; the new soft-limit start time) for `size` buffered bytes."""
        hard, soft, secs = self.obuf_limit(klass)
        if soft and size > soft:
            soft_since = soft_since or now
        else:
            soft_since = 0.0
        over = bool((hard and size >= hard) or (soft and soft_since and now - soft_since >= secs))
        return over, soft_since

    def obuf_limit(self, klass: str) -> tuple[int, int, int]:
        """(hard bytes, soft bytes, soft seconds) for a client class. The cron asks for every
        client a few times a second: the setting is parsed again only when its text is
        another string than the one parsed last."""
        text = self.client_output_buffer_limit
        cache = self.__dict__.get("_obuf_parsed")
        if cache is None or cache[0] is not text:
            words = text.split()
            table: dict[str, tuple[int, int, int]] = {}
            for i in range(0, len(words) - 3, 4):  # the first group of a class counts
                table.setdefault(words[i], (int(words[i + 1]), int(words[i + 2]),
                                            int(words[i + 3])))
            cache = self.__dict__["_obuf_parsed"] = (text, table)
        return cache[1].get(klass, (0, 0, 0))


def _merge_obuf_limits(current: str, raw: bytes) -> str:
    """client-output-buffer-limit takes `class hard soft seconds` groups and replaces only those."""
    words = raw.decode(errors="replace").split()
    if not words or len(words) % 4:
        raise ConfigError(errors.CONFIG_OBUF_FORMAT)
    table = {}
    cur = current.split()
    for i in range(0, len(cur) - 3, 4):
        table[cur[i]] = cur[i + 1:i + 4]
    for i in range(0, len(words), 4):
        klass = words[i].lower()
        if klass == "replica":
            klass = "slave"
        if klass not in ("normal", "slave", "pubsub"):
            raise ConfigError(errors.CONFIG_OBUF_CLASS)
        vals = [str(parse_memory(w.encode())) for w in words[i + 1:i + 3]]
        if not words[i + 3].isdigit():
            raise ConfigError(errors.CONFIG_OBUF_SOFT_SECONDS)
        table[klass] = [*vals, words[i + 3]]
    return " ".join(f"{k} {' '.join(v)}" for k, v in table.items())


def parse_config_file(text: str) -> list[tuple[str, list[str]]]:
    """redis.conf syntax: `name value...` per line, '#' comments, quoted arguments allowed."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, posix=True)
        except ValueError as e:
            raise ConfigError(f"line {lineno}: {e}") from None
        out.append((words[0].lower(), words[1:]))
    return out
