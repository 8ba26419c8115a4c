"""The compiled hot path and the interpreted one (node/native.py, setup.py).

- INFO server's `xshard_compiled` says which path runs, and XSHARD_PURE_PYTHON=1 forces the
  interpreted one;
- an extension older than its source is never run (the stale-build trap);
- setup.py without a working C compiler still installs, interpreted;
- the node and router differential tests pass on the interpreted path too (CI runs the whole
  suite compiled; `.ci/run` checks that the build compiled).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from node import native

REPO = Path(__file__).resolve().parent.parent


def _env(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(native.PURE_ENV, None)
    if pure:
        env[native.PURE_ENV] = "1"
    return env


def _built_and_fresh() -> bool:
    """What the test expects INFO to say without XSHARD_PURE_PYTHON: every hot module has a
    fresh extension."""
    for name in native.COMPILED:
        py = REPO.joinpath(*name.split(".")).with_suffix(".py")
        exts = [py.with_suffix(s) for s in native.importlib.machinery.EXTENSION_SUFFIXES]
        ext = next((e for e in exts if e.exists()), None)
        if ext is None or native.is_stale(ext, py):
            return False
    return True


def _loaded_from(pure: bool) -> list[str]:
    code = ("import node.server, node.commands, router.proxy, sys\n"
            "from node import native\nnode.commands.load_all()\n"
            "print(int(native.compiled()))\n"
            "print('\\n'.join(sys.modules[m].__file__ for m in native.COMPILED))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(pure), check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    return out


def test_pure_forced_loads_every_hot_module_from_source() -> None:
    out = _loaded_from(pure=True)
    assert out[0] == "0"
    assert len(out) == 1 + len(native.COMPILED)
    assert all(f.endswith(".py") for f in out[1:]), out


def test_default_runs_the_extensions_when_built() -> None:
    out = _loaded_from(pure=False)
    want = _built_and_fresh()
    assert out[0] == str(int(want))
    assert all(f.endswith(".py") != want for f in out[1:]), out


@pytest.mark.parametrize("pure", [True, False], ids=["pure", "default"])
def test_info_reports_the_path(xnode, pure: bool) -> None:  # noqa: ANN001
    node = xnode(env=_env(pure))
    info = redis.Redis(port=node.port).info("server")
    assert info["xshard_compiled"] == (0 if pure else int(_built_and_fresh()))


def test_stale_extension_is_detected(tmp_path: Path) -> None:
    py = tmp_path / "m.py"
    pxd = tmp_path / "m.pxd"
    ext = tmp_path / "m.so"
    for f in (py, pxd, ext):
        f.write_text("")
    os.utime(py, (100, 100))
    os.utime(pxd, (100, 100))
    os.utime(ext, (200, 200))
    assert not native.is_stale(ext, py)
    os.utime(py, (300, 300))  # the source edited after the build
    assert native.is_stale(ext, py)
    os.utime(py, (100, 100))
    os.utime(pxd, (300, 300))  # only the declarations edited
    assert native.is_stale(ext, py)



def test_recorded_sources_decide_over_times(tmp_path: Path) -> None:
    """With setup.py's record beside the extension, a source rewritten unchanged (a rebase, a
    checkout) keeps the extension; a changed `.py` or `.pxd` makes it stale at once."""
    py = tmp_path / "m.py"
    pxd = tmp_path / "m.pxd"
    ext = tmp_path / "m.so"
    py.write_text("x = 1\n")
    pxd.write_text("cdef int y\n")
    ext.write_text("")
    os.utime(ext, (200, 200))
    native.record_sources(ext, py)
    os.utime(py, (300, 300))  # rewritten with the same content after the build
    os.utime(pxd, (300, 300))
    assert not native.is_stale(ext, py)
    py.write_text("x = 2\n")
    assert native.is_stale(ext, py)
    py.write_text("x = 1\n")
    assert not native.is_stale(ext, py)
    pxd.write_text("cdef long y\n")
    assert native.is_stale(ext, py)
    pxd.write_text("cdef int y\n")
    os.utime(ext, (10**10, 10**10))  # rebuilt without a new record: times decide again
    py.write_text("x = 3\n")
    assert not native.is_stale(ext, py)

def test_another_modules_declarations_are_part_of_the_sources(tmp_path: Path) -> None:
    """A module compiled against another hot module's old `.pxd` (say a Stream with fewer
    fields) reads that module's objects with the wrong layout: an edit of a `.pxd` it
    cimports, directly or through another, makes its extension stale (and setup.py compiles
    it again instead of reusing it); an unrelated `.pxd` does not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    files = {"keyspace.pxd": "from pkg.groups cimport G\n", "groups.pxd": "from pkg.stream cimport S\n",
             "stream.pxd": "cdef class S:\n    cdef int a\n", "other.pxd": "cdef int z\n"}
    for name, text in files.items():
        (pkg / name).write_text(text)
        (pkg / name).with_suffix(".py").write_text("x = 1\n")
    py, ext = pkg / "keyspace.py", pkg / "keyspace.so"
    ext.write_text("")
    os.utime(ext, (200, 200))  # the record, written now, is newer: it decides
    native.record_sources(ext, py)
    assert native._declarations(py) == [pkg / "groups.pxd", pkg / "stream.pxd"]
    assert not native.is_stale(ext, py)
    (pkg / "other.pxd").write_text("cdef long z\n")
    assert not native.is_stale(ext, py)
    (pkg / "stream.pxd").write_text("cdef class S:\n    cdef int a, b\n")  # a field more
    assert native.is_stale(ext, py)
    (pkg / "stream.pxd").write_text(files["stream.pxd"])
    assert not native.is_stale(ext, py)


def test_the_hot_modules_cimports_are_found() -> None:
    """The real tree: the router's proxy depends on the node's declarations it cimports."""
    deps = {p.relative_to(REPO).as_posix() for p in
            native._declarations(REPO / "router" / "proxy.py")}
    assert {"node/commands/reads.pxd", "node/stream.pxd", "router/client.pxd"} <= deps


def test_a_partial_build_runs_every_hot_module_interpreted(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                          capsys) -> None:  # noqa: ANN001
    """All or nothing: one hot module left uncompiled (its compile failed) while the others
    were compiled sends every one of them to its source, with a warning; a full build and no
    build at all run as they are."""
    suffix = native.importlib.machinery.EXTENSION_SUFFIXES[0]
    pkg = tmp_path / "hotpkg"
    pkg.mkdir()
    names = ["hotpkg.a", "hotpkg.b", "hotpkg.c"]
    for n in names:
        (tmp_path / (n.replace(".", "/") + ".py")).write_text(f"NAME = {n!r}\n")
    monkeypatch.setattr(native, "_ROOT", tmp_path)
    monkeypatch.setattr(native, "COMPILED", names)
    monkeypatch.setattr(native, "_HOT", frozenset(names))
    monkeypatch.delenv(native.PURE_ENV, raising=False)

    def decide() -> tuple[bool, str]:
        monkeypatch.setattr(native, "_source", None)
        source = native._use_source()
        return source, capsys.readouterr().err

    assert decide() == (False, "")  # nothing built: the ordinary import of the sources
    for n in names[:2]:  # a and b compiled, c failed to compile
        py = tmp_path / (n.replace(".", "/") + ".py")
        ext = py.with_suffix(suffix)
        ext.write_bytes(b"")
        native.record_sources(ext, py)
    source, err = decide()
    assert source and "hotpkg.c not compiled (a partial build)" in err, err
    assert "runs interpreted" in err
    spec = native._finder.find_spec("hotpkg.a")  # a compiled module is handed its source
    assert spec is not None and spec.origin == str(tmp_path / "hotpkg" / "a.py")
    c = tmp_path / "hotpkg" / ("c" + suffix)
    c.write_bytes(b"")
    native.record_sources(c, tmp_path / "hotpkg" / "c.py")
    assert decide() == (False, "")  # the full build runs compiled
    assert native._finder.find_spec("hotpkg.a") is None  # the ordinary finder: the extension
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert decide() == (True, "")  # forced: no warning


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_build_without_a_compiler_falls_back(tmp_path: Path) -> None:
    """setup.py build_ext with a C compiler that fails: the build succeeds, nothing compiled."""
    pytest.importorskip("Cython")
    shutil.copy(REPO / "setup.py", tmp_path / "setup.py")
    (tmp_path / "node").mkdir()
    shutil.copy(REPO / "node" / "effects.py", tmp_path / "node" / "effects.py")
    shutil.copy(REPO / "node" / "effects.pxd", tmp_path / "node" / "effects.pxd")
    (tmp_path / "node" / "__init__.py").write_text("")
    native_py = (REPO / "node" / "native.py").read_text()  # its helpers, one hot module
    (tmp_path / "node" / "native.py").write_text(
        re.sub(r"(?ms)^COMPILED = \[.*?^\]", 'COMPILED = ["node.effects"]', native_py))
    env = _env(pure=False)
    env.update(CC="false", LDSHARED="false", CXX="false")
    res = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "runs interpreted" in res.stderr
    assert "xshard: [1/1] compiling node.effects" in res.stderr  # a line per module
    assert not list((tmp_path / "node").glob("effects.*.so"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_module_built_from_the_same_sources_is_not_compiled_again(tmp_path: Path) -> None:
    """Built once: a second build in fresh build directories (as pip makes for every install,
    e.g. `pip install -e '.[spark]'` after `pip install -e .`) reuses the extension beside the
    source, with no compiler at all (CC=false would fail any compile); an edited source is
    compiled again."""
    pytest.importorskip("Cython")
    shutil.copy(REPO / "setup.py", tmp_path / "setup.py")
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "__init__.py").write_text("")
    (tmp_path / "node" / "tiny.py").write_text("def f(x):\n    return x + 1\n")
    native_py = (REPO / "node" / "native.py").read_text()
    (tmp_path / "node" / "native.py").write_text(
        re.sub(r"(?ms)^COMPILED = \[.*?^\]", 'COMPILED = ["node.tiny"]', native_py))

    def build(n: int, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace", "--build-temp", f"t{n}",
             "--build-lib", f"l{n}"], cwd=tmp_path, env={**_env(pure=False), **env},
            capture_output=True, text=True, timeout=600)

    first = build(1)
    assert first.returncode == 0 and "[1/1] compiling node.tiny" in first.stderr, first.stderr
    (so,) = (tmp_path / "node").glob("tiny.*.so")
    built = so.stat().st_mtime_ns
    again = build(2, CC="false", LDSHARED="false")
    assert again.returncode == 0, again.stderr
    assert "[1/1] node.tiny: already compiled from these sources" in again.stderr, again.stderr
    assert "compiling" not in again.stderr and "not compiled" not in again.stderr
    assert so.stat().st_mtime_ns == built
    assert not native.is_stale(so, tmp_path / "node" / "tiny.py")
    (tmp_path / "node" / "tiny.py").write_text("def f(x):\n    return x + 2\n")
    edited = build(3)
    assert edited.returncode == 0 and "[1/1] compiling node.tiny" in edited.stderr
    assert not native.is_stale(so, tmp_path / "node" / "tiny.py")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_differential_tests_pass_interpreted() -> None:
    """The node's and the router's differential tests and the request reader's tests, again
    with XSHARD_PURE_PYTHON=1."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "tests/node/test_differential.py", "tests/router/test_router_core.py",
         "tests/node/test_request_reader.py",
         "-k", "match_redis or differential or request_reader"],
        cwd=REPO, env=_env(pure=True), capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout


def _pxd_classes(pxd: Path) -> dict[str, set[str]]:
    """cdef class name -> its declared attribute names, from a .pxd, with those of its base
    when that is a cdef class declared above it or in a .pxd of a compiled module."""
    out: dict[str, set[str]] = {}
    cur: set[str] | None = None
    for line in pxd.read_text().splitlines():
        m = re.match(r"cdef class (\w+)(?:\((\w+)\))?", line)
        if m:
            cur = out[m.group(1)] = set()
            base = m.group(2)
            if base:  # a base declared above in this .pxd, or in another compiled module's
                cur |= set(out[base]) if base in out else _declared_anywhere(base)
            continue
        m = re.match(r"\s+cdef (?:public |readonly )?(?:(?:unsigned|signed|long|short) )*[\w.]+ "
                     r"([\w, ]+)$", line)  # C types of several words: long long, ...
        if m and cur is not None:
            cur.update(n.strip() for n in m.group(1).split(","))
    return out


def _declared_anywhere(cls: str) -> set[str]:
    """The attributes a cdef class of any compiled module's .pxd declares (none if no .pxd
    declares it)."""
    for module in native.COMPILED:
        pxd = REPO.joinpath(*module.split(".")).with_suffix(".pxd")
        if pxd.exists() and re.search(rf"^cdef class {cls}\b", pxd.read_text(), re.M):
            return _pxd_classes(pxd)[cls]
    return set()


def _assigned_attributes(cls: ast.ClassDef) -> set[str]:
    """`__slots__` entries and every `self.x = ...` in the class body."""
    names: set[str] = set()
    for st in cls.body:
        if isinstance(st, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in st.targets):
            names |= {e.value for e in st.value.elts if isinstance(e, ast.Constant)}
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            for a in ast.walk(t):
                if (isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)
                        and a.value.id == "self"):
                    names.add(a.attr)
    return names


@pytest.mark.parametrize("module", native.COMPILED)
def test_pxd_declares_every_attribute(module: str) -> None:
    """An extension type has a fixed set of attributes: one added to the .py but not to its
    .pxd works interpreted and fails (or, with __dict__, runs slowly) compiled."""
    py = REPO.joinpath(*module.split(".")).with_suffix(".py")
    pxd = py.with_suffix(".pxd")
    if not pxd.exists():
        return
    declared = _pxd_classes(pxd)
    tree = ast.parse(py.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert set(declared) <= set(classes), f"{pxd.name} declares classes {module} lacks"
    for name, attrs in declared.items():
        missing = _assigned_attributes(classes[name]) - attrs - {"__weakref__"}
        assert not missing, f"{module}.{name}: declare {sorted(missing)} in {pxd.name}"


def test_compiled_entry_encoder_matches_the_interpreted_one() -> None:
    """encode_entries compiled writes the reply into one C buffer; it must give the bytes the
    interpreted encoder and the one-entry encoder give, at the edges of IDs and lengths, and
    hand anything but lists of bytes to the interpreted encoder."""
    import random

    from node.commands import entryreplies

    rnd = random.Random(7)
    edge = [0, 1, 9, 10, (1 << 64) - 1, 1 << 63]
    for _ in range(300):
        m = rnd.randint(0, 9)
        sids = [(rnd.choice(edge + [rnd.getrandbits(64)]) << 64)
                | rnd.choice(edge + [rnd.getrandbits(64)]) for _ in range(m)]
        ents = [[rnd.randbytes(rnd.choice([0, 1, 9, 10, 99, 100, 255, 256, 5000]))
                 for _ in range(rnd.choice([0, 2, 3, 10]))] for _ in range(m)]
        want = b"".join(entryreplies.entry_reply(s, f) for s, f in zip(sids, ents, strict=True))
        assert entryreplies.encode_entries(sids, ents) == want
        assert entryreplies._encode_entries_py(sids, ents) == want
    odd = [[b"f", bytearray(b"v")], (b"f", b"v")]
    assert entryreplies.encode_entries([1 << 64, 2 << 64], odd) == (
        entryreplies.entry_reply(1 << 64, [b"f", b"v"])
        + entryreplies.entry_reply(2 << 64, [b"f", b"v"]))


def test_group_id_codecs_match_the_general_parser() -> None:
    """XACK's IDs are parsed by a C loop compiled and by a regex interpreted; both must agree
    with the general strict parser (same IDs, same error), the offset counted for the
    XCLAIMs of a `>` read nobody listens to must be the length of the effects it skips, and
    the effects' IDs written by C loops must read as format_id writes them."""
    import random

    from node.commands import groups
    from node.resp import ReplyError, encode_command
    from node.streamid import format_id, parse_strict_id_or_error

    def general(args: list[bytes]) -> list[int] | bytes:
        try:
            return [parse_strict_id_or_error(a) for a in args]
        except ReplyError as e:
            return e.args[0]

    def fast(args: list[bytes]) -> list[int] | bytes:
        try:
            return groups.parse_strict_ids_or_error(args)
        except ReplyError as e:
            return e.args[0]

    rnd = random.Random(11)
    parts = [b"0", b"1", b"9", b"10", b"007", b"18446744073709551615", b"18446744073709551616",
             b"99999999999999999999", b"0" * 40 + b"1", b"", b"x", b"1 ", b"+", b"-"]
    for _ in range(2000):
        args = []
        for _ in range(rnd.randint(1, 4)):
            shape = rnd.random()
            if shape < 0.7:
                args.append(rnd.choice(parts) + b"-" + rnd.choice(parts))
            elif shape < 0.8:
                args.append(rnd.choice(parts))
            else:
                args.append(b"%d-%d" % (rnd.getrandbits(64), rnd.getrandbits(64)))
        assert fast(args) == general(args), args
    assert fast([b"0" * 126 + b"-1"]) == general([b"0" * 126 + b"-1"])
    assert fast([b"0" * 127 + b"-1"]) == general([b"0" * 127 + b"-1"])

    for _ in range(200):
        sids = sorted(rnd.choice([0, 1, 9, 10, rnd.getrandbits(rnd.randint(1, 64))]) << 64
                      | rnd.choice([0, 9, 10, rnd.getrandbits(rnd.randint(1, 64))])
                      for _ in range(rnd.randint(1, 12)))
        key, group, cons = (rnd.randbytes(rnd.choice([0, 1, 9, 10, 120])) for _ in range(3))
        now = rnd.choice([0, 9, 10, 1_700_000_000_000])
        want = sum(len(encode_command([b"XCLAIM", key, group, cons, b"0", format_id(s), b"TIME",
                                       b"%d" % now, b"RETRYCOUNT", b"1", b"FORCE", b"JUSTID",
                                       b"LASTID", format_id(s)])) for s in sids)
        assert groups.xclaim_run_len(key, group, cons, now, sids) == want
        assert [groups._id_text(s) for s in sids] == [format_id(s) for s in sids]


def test_id_ints_come_from_the_path_the_running_python_allows() -> None:
    """Compiled, an ID's int is written digit by digit only on the layout that was measured
    (CPython 3.11, 30-bit digits; xshard_make_id in node/streamnodes.pxd), chosen when the
    module is compiled; any other Python gets the public C API. The path compiled in must
    be the one the running Python allows, and the ints it makes (at the edges of both
    halves, from the open node and from sealed ones) must be exactly `ms << 64 | seq`."""
    from node import streamnodes
    from node.stream import Stream

    if not streamnodes.__file__.endswith(".py"):
        layout = sys.version_info[:2] == (3, 11) and sys.int_info.bits_per_digit == 30
        want = "cpython-3.11-digits" if layout else "public"
    else:
        want = "interpreted"
    assert streamnodes.id_int_path() == want
    edges = [0, 1, (1 << 30) - 1, 1 << 30, (1 << 60) - 1, 1 << 60, 1 << 63, (1 << 64) - 1]
    pairs = sorted({(ms, seq) for ms in edges for seq in edges} - {(0, 0)})
    s = Stream()
    for ms, seq in pairs:
        s.append_id(ms, seq, [b"f", b"v"], 4, 0)
    want_ids = [ms << 64 | seq for ms, seq in pairs]
    for got in ([x for x, _ in s.range(0, 1 << 128)], [x for x, _ in s.copy().range(0, 1 << 128)]):
        assert got == want_ids
        assert [(x >> 64, x & ((1 << 64) - 1)) for x in got] == pairs
        assert [hash(x) for x in got] == [hash(x) for x in want_ids]
        assert [str(x) for x in got] == [str(x) for x in want_ids]
    assert s.last_id == want_ids[-1]
    # ... and an ID's halves are read back from any int of up to 128 bits (compiled: from its
    # digits on that layout); past 128 bits or negative, none is an ID.
    from node.commands import groups
    from node.streamid import format_id

    odd = [(1 << 64) - 1, 1 << 64, (1 << 90) - 1, 1 << 90, (1 << 120) - 1, 1 << 120]
    for x in want_ids + odd + [(1 << 128) - 1]:
        assert groups._id_text(x) == format_id(x)
    if want != "interpreted":
        for bad in (1 << 128, 1 << 200, -1, -(1 << 70)):
            with pytest.raises(OverflowError):
                groups._id_text(bad)


def test_sealed_node_decoding_matches_what_was_appended() -> None:
    """Compiled, a read decodes a sealed node's IDs, bounds and strings by C loops over its
    packed bytes (node/streamnodes.py). Every shape the packing chooses (uniform or varied
    string lengths, lengths past 255, millisecond and sequence arrays of 2, 4 and 8 bytes,
    entries with their own field names, tombstones) must give back exactly what was
    appended, for any slice, the seeks must agree with bisect on the IDs, and a span encoded
    straight from what a node stores, forward or backward, must be the reply of its live
    entries."""
    import random
    from bisect import bisect_left, bisect_right

    from node.commands import entryreplies
    from node.stream import Stream
    from node.streamnodes import Block

    rnd = random.Random(5)
    for shape in range(40):
        s = Stream()
        added: dict[int, list[bytes]] = {}
        ms, seq = rnd.choice([0, 1, 1 << 40, (1 << 64) - 70]), 0
        width = rnd.choice([0, 1, 10, 300])
        for _ in range(rnd.randint(1, 60)):
            step = rnd.choice([0, 0, 1, 70_000, 1 << 33]) if ms < (1 << 64) - (1 << 34) else 1
            ms, seq = (ms, seq + rnd.choice([1, 1, 70_000, 1 << 33])) if step == 0 else (
                ms + step, rnd.choice([0, 5, 1 << 40]))
            names = [b"a", b"b"] if rnd.random() < 0.8 else [b"x%d" % rnd.randint(0, 3)]
            vals = [rnd.randbytes(width if shape % 2 else rnd.choice([0, 3, 255, 256, 700]))
                    for _ in names]
            fields = [x for pair in zip(names, vals, strict=True) for x in pair]
            sid = ms << 64 | seq
            s.append(sid, fields, rnd.choice([3, 7, 100]), 0)
            added[sid] = fields
        for x in rnd.sample(sorted(added), len(added) // 4):
            s.delete(x)
            del added[x]
        assert list(s.range(0, 1 << 128)) == sorted(added.items())
        assert list(s.range(0, 1 << 128, rev=True)) == sorted(added.items(), reverse=True)
        everything = s.copy()  # every node sealed, the tail's entries included
        for blk in everything._nodes:
            assert type(blk) is Block
            ids = blk.sids()
            assert ids == sorted(ids) and len(ids) == blk.n
            for i0 in range(blk.n + 1):
                for i1 in range(i0, blk.n + 1):
                    assert blk.sids(i0, i1) == ids[i0:i1]
                    ents = blk.entries(i0, i1)
                    live = [x in added for x in ids[i0:i1]]
                    assert [e for e, ok in zip(ents, live, strict=True) if ok] == [
                        added[x] for x in ids[i0:i1] if x in added]
            for probe in {*ids, *(x + 1 for x in ids), *(x - 1 for x in ids if x),
                          0, (1 << 128) - 1, 1 << 128, 1 << 140}:
                assert blk.lower(probe) == bisect_left(ids, probe), probe
                assert blk.upper(probe) == bisect_right(ids, probe), probe
        # A read's reply written straight from what a node stores (encode_span: a sealed
        # node's packed bytes, the open node's lists), forward and backward, tombstones
        # skipped, is the reply of the live entries that were appended.
        for blk in everything._nodes + s._nodes[-1:]:
            ids = blk.sids() if type(blk) is Block else blk.sids
            for i0 in range(blk.n + 1):
                for i1 in range(i0, blk.n + 1):
                    live = [(x, added[x]) for x in ids[i0:i1] if x in added]
                    assert entryreplies.encode_span(blk, i0, i1) == (
                        entryreplies.entries_reply(live)[1])
                    assert entryreplies.encode_span(blk, i0, i1, True) == (
                        entryreplies.entries_reply(live[::-1])[1])
        # Served per node, encoded straight from every node, in both directions.
        want = sorted(added.items())
        for rev in (False, True):
            order = want[::-1] if rev else want
            n, body = entryreplies.stream_range_reply(s, 0, 1 << 128, None, rev)
            assert (n, body) == entryreplies.entries_reply(order)
            for cap in (1, 2, 5, 30):
                assert entryreplies.stream_range_reply(s, 0, 1 << 128, cap, rev) == (
                    entryreplies.entries_reply(order[:cap]))
            if len(want) > 2:  # bounds inside nodes, on a deleted ID or between IDs
                probes = {x + d for b in everything._nodes for x in b.sids() for d in (0, 1)}
                lo, hi = rnd.sample(sorted(probes), 2)
                lo, hi = min(lo, hi), max(lo, hi)
                part = [e for e in order if lo <= e[0] <= hi]
                for cap in (None, 1, 3):
                    assert entryreplies.stream_range_reply(s, lo, hi, cap, rev) == (
                        entryreplies.entries_reply(part[:cap]))
