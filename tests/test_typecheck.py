"""The server contract (node/context.py) holds: mypy checks that the node's Server, the router
and the in-process test server implement their parts of it (tests/typecheck/conformance.py),
and that the code written against it (router/, node/protocol.py, node/client.py, Keyspace,
BlockingManager, EffectApplier) uses nothing else. The files are listed under [tool.mypy] in pyproject.toml."""

from __future__ import annotations

from pathlib import Path

from mypy import api

from tests.conftest import REPO


def _mypy(*args: str, cache: Path) -> tuple[str, int]:
    out, err, status = api.run(["--config-file", str(REPO / "pyproject.toml"),
                                "--cache-dir", str(cache), *args])
    return out + err, status


def test_the_server_contract_type_checks(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(REPO)
    out, status = _mypy(cache=tmp_path)
    assert status == 0, out


def test_a_server_missing_a_member_fails_the_check(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The check can fail: a router-like server without `remove_client` is not a
    ClientContext, and mypy says which member is missing."""
    monkeypatch.chdir(REPO)
    broken = tmp_path / "broken_server.py"
    broken.write_text(
        "from __future__ import annotations\n"
        "from node.context import ClientContext\n"
        "from router.proxy import Router\n\n\n"
        "class Broken(Router):\n"
        "    remove_client = None  # type: ignore[assignment]\n\n\n"
        "def check(b: Broken) -> ClientContext:\n"
        "    return b\n")
    out, status = _mypy(str(broken), cache=tmp_path / "cache")
    assert status == 1, out
    assert "remove_client" in out, out
