"""Configuration: the documented file matches the embedded defaults; bad values are refused clearly."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from vmsched.config import (
    Config,
    ConfigError,
    CpuManagerConfig,
    JobsConfig,
    LauncherConfig,
    format_cpu_list,
    load_config,
    parse_cpu_list,
)
from vmsched.cpumanager.lbd import LbdParams
from vmsched.cpumanager.manager import lbd_params

REPO = Path(__file__).resolve().parents[1]


def test_documented_config_is_the_defaults(tmp_path):
    documented = load_config(REPO / "systemd" / "vmsched.toml", state_dir=tmp_path)
    assert documented.cpumanager == CpuManagerConfig()
    text = (REPO / "systemd" / "vmsched.toml").read_text()
    assert documented.launcher == LauncherConfig() and documented.jobs == JobsConfig()
    for f in fields(CpuManagerConfig) + fields(LauncherConfig) + fields(JobsConfig):
        assert f"\n{f.name} =" in text, f"option {f.name} is not documented in systemd/vmsched.toml"


def test_precedence_and_instances(tmp_path, monkeypatch):
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[cpumanager]\nquantum_ms = 20\ncpus = "0-1"\n')
    cfg = load_config(cfg_file, state_dir=tmp_path / "a", overrides={"cpumanager": {"quantum_ms": 5.0}})
    assert cfg.cpumanager.quantum_ms == 5.0 and cfg.cpumanager.cpus == (0, 1)
    monkeypatch.setenv("VMSCHED_STATE_DIR", str(tmp_path / "b"))
    other = load_config()
    assert other.state_dir == (tmp_path / "b").resolve()
    assert other.shm_name != cfg.shm_name, "two state directories must not share shared memory"
    assert isinstance(other, Config)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[cpumanager]\nreserve_cpu = 3\n", "must be true or false"),
        ("[cpumanager]\nquantum_ms = 'fast'\n", "must be a number"),
        ("[launcherx]\n", "unknown section"),
        ("[cpumanager\n", "c.toml"),
        ("[cpumanager]\ndefault_queue = 'lifo'\n", "default_queue must be"),
        ("[cpumanager]\nlbd_placement_margin = -0.1\n", "lbd_placement_margin must be >= 0"),
        ("[cpumanager]\nlbd_behind_share = 1\n", "lbd_behind_share must be >= 0 and < 1"),
        ("[cpumanager]\nlbd_behind_share = -0.5\n", "lbd_behind_share must be >= 0 and < 1"),
        ("[cpumanager]\nlbd_uneven_load = 1.5\n", "lbd_uneven_load must be >= 0 and < 1"),
    ],
)
def test_bad_config_values(tmp_path, text, needle):
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(tmp_path / "c.toml", state_dir=tmp_path)


def test_cpu_lists():
    assert parse_cpu_list("0-3,6, 8-9") == (0, 1, 2, 3, 6, 8, 9)
    assert format_cpu_list([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9"
    for bad in ("", "3-1", "a", "-1"):
        with pytest.raises(ConfigError):
            parse_cpu_list(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/vmsched.toml")


def test_every_lbd_option_reaches_the_detector():
    """Each [cpumanager] lbd_* option, changed alone, changes the detector's parameters the daemon runs with."""
    default = CpuManagerConfig()
    assert lbd_params(default) == LbdParams()  # the daemon's defaults are the detector's own
    options = [f.name for f in fields(CpuManagerConfig) if f.name.startswith("lbd_")]
    assert "lbd_behind_share" in options and len(options) >= 12
    for name in options:
        value = getattr(default, name)
        changed = (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int) else value / 2
        assert lbd_params(replace(default, **{name: changed})) != lbd_params(default), f"{name} is not passed on"
    assert lbd_params(replace(default, quantum_ms=5.0)).quantum_s == 0.005
