"""`xshard node`: parse Redis-style options, start the server on uvloop, stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from node import __version__, gctuning
from node.config import BY_NAME, Config, ConfigError, apply_environment, parse_config_file

# Snapshots fork (node.snapshot.ChildSaver). gRPC (etcd's client) installs fork handlers that
# it skips while its threads are busy, and the child then crashed in at-fork code; without
# them the child simply never touches gRPC. Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

if TYPE_CHECKING:
    from node.server import Server

log = logging.getLogger("xshard.node")

USAGE = "xshard node [CONFIG-FILE] [--config FILE] [--<option> <value> ...]"
EXAMPLE = """Options use redis.conf names, e.g. --port 7000 --bind 127.0.0.1 --requirepass secret
--dir ./data --enable-debug-command yes --stream-node-max-entries 100."""


def full_usage() -> str:
    """`xshard node --help`: every setting of the config table, with default and description."""
    from node.config import help_parser

    return help_parser(USAGE, EXAMPLE + "\n\nA redis.conf-style file (the first argument, or "
                       "--config FILE) sets the same options;\nthe command line wins. Without "
                       "--etcd the node is a standalone server, like one Redis.").format_help()


class UsageError(Exception):
    pass


class HelpRequested(Exception):
    """--help: the text goes to stdout and the exit code is 0."""


def parse_args(argv: list[str]) -> tuple[Config, str]:
    """Redis-style arguments: `--name value [value...]`, repeated; `--config FILE` first."""
    config = Config()
    config_file = ""
    opts: list[tuple[str, list[str]]] = []
    i = 0
    if argv and not argv[0].startswith("-"):  # like redis-server: a leading config file
        config_file = argv[0]
        i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            raise HelpRequested(full_usage())
        if not a.startswith("--") or len(a) == 2:
            raise UsageError(f"xshard node: unexpected argument '{a}'\nusage: {USAGE}\n{EXAMPLE}")
        name = a[2:].lower()
        vals = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            vals.append(argv[i])
            i += 1
        if name == "config":
            if len(vals) != 1:
                raise UsageError("xshard node: --config takes one file name")
            config_file = vals[0]
            continue
        opts.append((name, vals))
    if config_file:
        try:
            with open(config_file) as f:
                file_opts = parse_config_file(f.read())
        except OSError as e:
            raise UsageError(f"xshard node: cannot read config file '{config_file}': {e.strerror}") from None
        except ConfigError as e:
            raise UsageError(f"xshard node: {config_file}: {e}") from None
        opts = file_opts + opts  # the command line wins, as with redis-server
    for name, vals in opts:
        if name not in BY_NAME:
            raise UsageError(f"xshard node: unknown option '{name}'\nusage: {USAGE}\n{EXAMPLE}")
        try:
            config.apply(name, " ".join(vals).encode(), startup=True)
        except ConfigError as e:
            raise UsageError(f"xshard node: bad value for '{name}': {e}") from None
    try:  # secrets from the environment, so that they need not be on argv
        apply_environment(config, {BY_NAME[name].name for name, _v in opts})
    except ConfigError as e:
        raise UsageError(f"xshard node: bad value in the environment: {e}") from None
    if config.daemonize:
        raise UsageError("xshard node: daemonize is not supported; run it under a supervisor")
    return config, os.path.abspath(config_file) if config_file else ""


def run(argv: list[str]) -> int:
    try:
        config, config_file = parse_args(argv)
    except HelpRequested as e:
        print(str(e).rstrip())
        return 0
    except UsageError as e:
        print(str(e).rstrip(), file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if config.loglevel == "debug" else logging.INFO,
        format=f"{os.getpid()}:M %(asctime)s %(levelname).1s %(message)s",
        filename=config.logfile or None,
    )
    # A path from the command line means the caller's directory, not --dir.
    for attr in ("aclfile", "tls_cert_file", "tls_key_file", "tls_client_cert_file",
                 "tls_client_key_file", "tls_ca_cert_file", "tls_ca_cert_dir", "tls_dh_params_file"):
        if getattr(config, attr):
            setattr(config, attr, os.path.abspath(getattr(config, attr)))
    try:
        os.makedirs(config.dir, exist_ok=True)
        os.chdir(config.dir)
    except OSError as e:
        print(f"xshard node: cannot use dir '{config.dir}': {e.strerror}", file=sys.stderr)
        return 1
    import uvloop

    # A file-size limit must turn into EFBIG write errors (MISCONF), not kill the node.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    return uvloop.run(_serve(config, config_file))


async def _serve(config: Config, config_file: str) -> int:
    from node.aof import LoadError
    from node.persistence import Persistence
    from node.server import Server

    server = Server(config, config_file)
    if not _configure_tls(server):
        return 1
    if config.aclfile:
        from node.resp import ReplyError

        try:
            server.acl.load_file(config.aclfile)
        except ReplyError as e:
            log.error("%s", e.message.decode(errors="replace"))
            log.error("Aborting xshard startup because of ACL errors. Exiting.")
            return 1
    persistence = server.persistence = Persistence(server)
    try:
        with gctuning.paused():
            persistence.load()
    except (LoadError, OSError) as e:
        log.error("%s", e)
        log.error("Fatal error loading the DB, check server logs. Exiting.")
        return 1
    # replication wiring
    from node.replication import Replication

    server.replication = Replication(server)
    server.replication.start()
    agent = None
    if config.etcd:  # cluster membership: lease, role and fencing from etcd
        from base.etcdconn import ConfigError as EtcdConfigError
        from node.membership.agent import Agent

        try:
            agent = Agent.start(server)
        except EtcdConfigError as e:
            log.error("Bad etcd settings: %s", e)
            return 1
    # Before the RESP port, so that a node that answers PING also answers scrapes.
    metrics = None
    if config.metrics_port:
        from node import metricsserver
        from node.metrics import NodeCollector

        server.metrics = NodeCollector(server)
        try:
            metrics = await metricsserver.start(
                metricsserver.new_registry(server.metrics), server.metrics.ready,
                (config.bind.split() or ["127.0.0.1"])[0].lstrip("-"), config.metrics_port,
                server.metrics.stream_text)
        except OSError as e:
            log.error("Could not listen for metrics on port %d: %s", config.metrics_port,
                      e.strerror)
            return 1
    persistence.start()
    try:
        await server.start()
    except OSError as e:
        log.error("Could not create server TCP listening socket %s:%d: %s", config.bind,
                  config.port if server.tcp_server is None and config.port else config.tls_port,
                  e.strerror)
        server.close()
        return 1
    # What start-up and loading made is long-lived: out of later scans (node/gctuning.py).
    gctuning.settle()
    gctuning.configure()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server.shutdown_hook = stop.set
    if server.tcp_server is not None:
        log.info("xshard node %s ready to accept connections tcp on %s:%d", __version__,
                 config.bind, config.port)
    if server.tls_server is not None:
        log.info("xshard node %s ready to accept connections tls on %s:%d", __version__,
                 config.bind, config.tls_port)
    await stop.wait()
    log.info("Received shutdown signal, closing")
    if agent is not None:
        await agent.stop()
    if metrics is not None:
        await metrics.stop()
    server.replication.shutdown()
    server.close()
    try:
        persistence.shutdown(None)
    except OSError as e:
        log.error("Error saving on shutdown: %s", e)
        return 1
    return 0


def _configure_tls(server: Server) -> bool:
    """The TLS contexts, before anything listens: a bad tls-* setting stops the start, with
    Redis's lines in the log."""
    from node import tls

    cfg = server.config
    if not (cfg.tls_port or cfg.tls_replication or cfg.tls_cluster):
        return True
    try:
        tls.configure(server)
    except tls.TlsError as e:
        log.error("%s", e)
        log.error("Failed to configure TLS. Check logs for more info.")
        return False
    return True
