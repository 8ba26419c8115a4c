"""The container image (Dockerfile): there is no Docker daemon here, so its install steps run
in a fresh virtualenv from a build context cut by .dockerignore, as `docker build` would run
them, and the result must be a working `xshard`. The rest is checked as text."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helm.chart import pyproject_version

DOCKERFILE = (REPO / "Dockerfile").read_text()


def stages() -> list[list[str]]:
    """The Dockerfile's instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pat) for p in parts) or fnmatch.fnmatch(rel, pat):
            return True
    return False


def build_context(dest: Path) -> Path:
    """The files `COPY . .` sees: the checkout less what .dockerignore names."""
    pats = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
            if p.strip() and not p.startswith("#")]
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = REPO / rel
        if src.is_file() and not ignored(rel, pats):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_dockerfile_is_multi_stage_non_root_with_xshard_as_entrypoint() -> None:
    build, final = stages()
    assert build[0].startswith("FROM python:") and build[0].endswith("-slim AS build")
    assert final[0].startswith("FROM python:") and "-slim" in final[0]
    assert any("build-essential" in i for i in build), "a compiler for the C extensions"
    assert not any("build-essential" in i for i in final)
    assert 'ENTRYPOINT ["xshard"]' in final and 'VOLUME ["/data"]' in final
    assert "USER 10001:10001" in final  # the chart's securityContext.runAsUser
    assert "COPY --from=build /opt/xshard /opt/xshard" in final
    labels = " ".join(i for i in final if i.startswith("LABEL"))
    for key in ("title", "description", "version"):
        assert f"org.opencontainers.image.{key}=" in labels
    license_ = re.search(r'^license = \{text = "([^"]+)"\}', (REPO / "pyproject.toml").read_text(),
                         re.M)
    assert license_ and f'org.opencontainers.image.licenses="{license_[1]}"' in labels
    assert f"ARG VERSION={pyproject_version()}" in final


def test_dockerignore_keeps_what_pip_install_needs(tmp_path: Path) -> None:
    ctx = build_context(tmp_path)
    for need in ("pyproject.toml", "README.md", "node/server.py", "node/commands.json",
                 "router/proxy.py", "control/cli.py", "base/store.py",
                 "pipeline/__init__.py"):
        assert (ctx / need).is_file(), need
    for never in ("tests", "benchmarks", "helm", ".git"):
        assert not (ctx / never).exists(), never


@pytest.mark.slow
def test_the_image_install_steps_build_a_working_xshard(tmp_path: Path) -> None:
    """The build stage's `python -m pip ...` steps, run as written in a new virtualenv (it sees
    the installed dependencies, so nothing else is downloaded)."""
    (build, _final) = stages()
    steps = [i.removeprefix("RUN ").strip() for i in build
             if i.startswith("RUN python -m pip")]
    assert steps and steps[-1] == "python -m pip install -q ."
    ctx = build_context(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    # XSHARD_PURE_PYTHON=1: setup.py skips compiling the hot path, which takes minutes on a
    # loaded machine; the compiled build is checked by .ci/run and tests/test_native.py.
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(tmp_path), "XSHARD_PURE_PYTHON": "1"}
    for step in steps:
        r = subprocess.run(["sh", "-c", step], cwd=ctx, env=env, capture_output=True,
                           text=True, timeout=600)
        # `--upgrade pip` may find no index (CI's own copy tolerates that too).
        if "--upgrade pip" not in step:
            assert r.returncode == 0, (step, r.stdout[-2000:], r.stderr[-2000:])
    r = subprocess.run([str(venv / "bin" / "xshard"), "--version"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == f"xshard {pyproject_version()}", r
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import node.server, router.proxy, control.cli; print(node.__file__)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(str(venv)), (r.stdout, r.stderr)
    r = subprocess.run([str(venv / "bin" / "xshard"), "node", "--help"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--appendfsync" in r.stdout
