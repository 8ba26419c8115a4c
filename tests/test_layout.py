"""The packages' import arrows point down: base <- node <- router <- control, pipeline.

Read from the sources (every import, those under TYPE_CHECKING and inside functions
included), so a lazy or type-only import that closes a loop fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("base", "node", "router", "control", "pipeline")
# What each package may import of the others (besides itself).
ALLOWED = {
    "base": set(),
    "node": {"base"},
    "router": {"base", "node"},
    "control": {"base", "node", "router"},
    "pipeline": {"base", "node"},
}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module)
    return out


def _package_arrows() -> dict[tuple[str, str], list[str]]:
    arrows: dict[tuple[str, str], list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for name in _imports(path):
                top = name.split(".")[0]
                if top in PACKAGES and top != pkg:
                    arrows.setdefault((pkg, top), []).append(
                        f"{path.relative_to(ROOT)}: {name}")
    return arrows


def test_packages_import_only_below() -> None:
    bad = {k: v for k, v in _package_arrows().items() if k[1] not in ALLOWED[k[0]]}
    assert not bad, "imports that point up:\n" + "\n".join(
        f"{a} -> {b}: {', '.join(v)}" for (a, b), v in bad.items())


def test_no_package_cycle() -> None:
    edges: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for a, b in _package_arrows():
        edges[a].add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges[start] - seen:
            if nxt == goal or reaches(nxt, goal, seen | {nxt}):
                return True
        return False

    assert not [p for p in PACKAGES if reaches(p, p, set())]


def test_the_cli_entry_point_stays() -> None:
    """`xshard = control.cli:main`: the console script that users and the chart run."""
    assert 'xshard = "control.cli:main"' in (ROOT / "pyproject.toml").read_text()
