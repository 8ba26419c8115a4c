"""docs/configuration.md is generated from the settings table and the parsers
(tools/gen_config_docs.py): a setting or option added without regenerating it fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_configuration_md_is_up_to_date(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XSHARD_")}
    r = subprocess.run([sys.executable, str(REPO / "tools" / "gen_config_docs.py"), "--check"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 0, r.stderr


def test_every_node_setting_and_router_option_is_documented() -> None:
    from node.config import SETTINGS
    from router.main import build_parser

    text = (REPO / "docs" / "configuration.md").read_text()
    for s in SETTINGS:
        assert f"| `--{s.name}` |" in text, s.name
    for a in build_parser()._actions:  # noqa: SLF001
        for o in a.option_strings:
            if o.startswith("--") and o != "--help":
                assert f"`{o}`" in text, o
