"""The code base stays clean under ruff (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess

from tests.conftest import BIN, REPO


def test_ruff_check_passes():
    r = subprocess.run(
        [str(BIN / "ruff"), "check", "--no-cache", str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
