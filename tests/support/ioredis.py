"""ioredis (Node.js) for the tests that check a real non-Python cluster client: the
`ioredis_dir` fixture installs it once per session into a temporary directory (skipping the
test where node/npm are missing or the install fails). Test modules import the fixture."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def ioredis_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node/npm not installed (.ci/run installs them)")
    d = tmp_path_factory.mktemp("ioredis")
    r = subprocess.run(["npm", "install", "--silent", "--prefix", str(d), "ioredis"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"npm could not install ioredis: {r.stderr[-300:]}")
    return d
