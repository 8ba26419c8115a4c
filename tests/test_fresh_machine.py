"""The README's two commands on a fresh machine: the first installs into a virtual environment
(a stock Debian 12 / Ubuntu 24.04 Python refuses `pip install` outside one, PEP 668), `.ci/run`
uses `python3` and its own venv, hides no failing step, and the README lists everything it
installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

CI = REPO / ".ci" / "run"


def _readme_commands() -> list[str]:
    """The lines of the README's first code block, comments cut."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no sh code block"
    return [line.split("  #")[0].strip() for line in block[1].splitlines() if line.strip()]


def test_the_readme_starts_with_the_two_commands() -> None:
    first, second = _readme_commands()[:2]
    steps = [s.strip() for s in first.split("&&")]
    assert steps[0].startswith("python3 -m venv "), steps  # python3: Debian has no `python`
    assert steps[-1] == "xshard up" and "pip install -e ." in steps, steps
    assert second == "bash .ci/run"


def test_ci_run_hides_no_failing_step() -> None:
    text = CI.read_text()
    assert "set -euo pipefail" in text
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for line in code:
        assert "|| true" not in line, line  # a step that matters fails the run
        assert not re.search(r"(^|[\s;&|(])python(\s|$)", line), line  # only python3 is there
    r = subprocess.run(["bash", "-n", str(CI)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert re.search(r'-m venv\b', text), "ci makes its own virtual environment"


def test_the_readme_lists_everything_ci_run_installs() -> None:
    packages = set()
    for m in re.finditer(r"pkgs\+=\(([^)]*)\)", CI.read_text()):
        packages.update(m[1].split())
    assert {"redis-server", "nftables", "python3-venv", "build-essential"} <= packages
    text = " ".join((REPO / "README.md").read_text().split())
    para = text[text.index("The second command"):]
    para = para[:para.index("Talk to the router")]
    missing = [p for p in sorted(packages) if f"`{p}`" not in para]
    assert missing == [], f"README's second-command paragraph leaves out {missing}"
    for extra in ("`dev`", "`spark`"):
        assert extra in para


@pytest.mark.slow  # about 30 s on a loaded machine: a venv and an editable install
@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no /usr/bin/python3")
def test_the_readme_install_step_works_in_a_bare_environment(tmp_path: Path) -> None:
    """The first command's install step, as the README writes it, from `env -i
    PATH=/usr/bin:/bin`: the system's python3, no pyenv, no activated venv, no pip config.
    Kept cheap and offline, so it checks that the steps run and install `xshard`, not the
    downloads: XSHARD_PURE_PYTHON=1 (no compiling), pip without an index, without the
    dependencies and without build isolation, and the venv sees the system's site-packages
    (Debian's setuptools and wheel build the editable wheel, as the isolated build would)."""
    probe = subprocess.run(["/usr/bin/python3", "-c", "import ensurepip, venv, setuptools, wheel"],
                           capture_output=True)
    if probe.returncode:
        pytest.skip("the system's python3 lacks venv, setuptools or wheel")
    first = _readme_commands()[0]
    install = first[:first.rindex("&& xshard up")].strip()
    assert install.startswith("python3 -m venv ")
    install = install.replace("python3 -m venv ", "python3 -m venv --system-site-packages ", 1)
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".xshard", "build", "__pycache__", "*.so", "*.so.sources", "*.c",
        "*.egg-info", ".pytest_cache", ".ruff_cache", ".mypy_cache", "benchmarks", "tests"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XSHARD_PURE_PYTHON": "1",
           "PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    t0 = time.monotonic()
    r = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "-c",
                        f"set -e; {install}; command -v xshard; xshard --version"], cwd=src,
                       capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    where, version = r.stdout.strip().splitlines()[-2:]
    assert where == str(src / ".venv" / "bin" / "xshard"), r.stdout[-500:]
    assert version == "xshard 0.1.0", r.stdout[-500:]
    assert "compiling" not in r.stdout + r.stderr  # XSHARD_PURE_PYTHON=1 skips the build
    assert took < 120, took
