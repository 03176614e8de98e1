"""The one definition of vmsched's configuration: defaults, config file, environment, command line.

Precedence (low to high): embedded defaults, the TOML config file (`--config`, else $VMSCHED_CONFIG,
else `<state dir>/vmsched.toml` if present), environment ($VMSCHED_STATE_DIR), command-line options.
Both daemons and every CLI read it the same way, so they agree on socket paths and shm names.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vmsched.logs import LEVELS


class ConfigError(ValueError):
    """A configuration value or file is wrong; the message says which and why."""


def default_state_dir() -> Path:
    env = os.environ.get("VMSCHED_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return (Path(base) / "vmsched").resolve()


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,6,8-9' -> (0, 1, 2, 3, 6, 8, 9), as in taskset/cpuset lists."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                cpus.update(range(lo, hi + 1))
            else:
                cpus.add(int(part))
        except ValueError:
            raise ConfigError(f"bad CPU list {text!r}: expected e.g. '0-3,6'") from None
    if not cpus or min(cpus) < 0:
        raise ConfigError(f"bad CPU list {text!r}: expected e.g. '0-3,6'")
    return tuple(sorted(cpus))


def format_cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    out: list[str] = []
    s = sorted(cpus)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class CpuManagerConfig:
    cpus: tuple[int, ...] | None = None  # None: the CPUs of the daemon's own affinity mask
    reserve_cpu: bool = False  # keep the first managed CPU for the daemons
    quantum_ms: float = 10.0
    repin_quanta: int = 100  # re-apply every rank's affinity this often even if nothing changed
    lbd_threshold: float = 0.10  # IP below this -> local queues (thesis §4.4.4)
    lbd_stable_change: float = 0.05  # CVCS relative change that counts as "stable"
    lbd_stable_quanta: int = 10  # ... for this many consecutive quanta
    lbd_ip_quanta: int = 300  # the first IP window closes after this many quanta at most
    lbd_window_cpu_ms: float = 200.0  # ... and as soon as the ranks' mean CPU time in it reaches this
    lbd_remeasure_quanta: int = 1000  # a job decided local re-measures on the global queue this often
    lbd_global_trial: bool = True  # a kept local trial is followed by one on the decided global queue
    lbd_placement_trial: bool = True  # ... and before it, by one in a block placement (rank r on CPU r * P / N)
    lbd_placement_margin: float = 0.05  # ... kept with this much more progress per second (over segments of each)
    lbd_behind_share: float = 0.5  # a local trial under this share of its window's pace, 50 calls per rank in, fails;
    # r mod P under this share of block's pace ends a placement trial after one round (lbd.py: "Far ahead")
    lbd_queue_trial: bool = True  # on one CPU, local queues are tried against the global queue so too
    lbd_sparse_global: bool = True  # a job whose MPI calls are too sparse for a trial to read stays global
    lbd_quick_window: bool = True  # a busy job's first window opens at once; only a balanced reading of it decides
    lbd_read_at_calls: bool = True  # a local trial fails only where its calls pass a multiple of 50 per rank
    # A placement trial leaves out a round block led where r mod P's segments had this share of the partition's
    # CPUs less than block's (outside load took them; lbd.py: "Uneven load"); 0: off
    lbd_uneven_load: float = 0.075
    default_queue: str = "lbd"  # lbd | local | global
    # Each job's ranks in a CPU cgroup of their own where the kernel would schedule each as its own
    # autogroup (vmsched/cpumanager/cpugroups.py); needs root and the cgroup cpu controller. Off by
    # default: beside a grouped job a process outside it (a daemon, a shell, a CLI command) waited up to
    # seconds for a CPU (kernel 6.18, cgroup v1; vmsched/vmruntime/README.md, bench/cpu_groups.py).
    job_cpu_groups: bool = False


@dataclass(frozen=True)
class LauncherConfig:
    policy: str = "fjt+easy:malleable/fifo"  # POLICY[+BACKFILL[:EXPIRY]][/ORDER], see vmsched/launcher/policy
    long_threshold_s: float = 300.0  # estimate above this -> long job (thesis: 30 min, scaled to this node)
    long_estimate_s: float = 900.0  # estimate of a job submitted with --class long and no --time
    short_estimate_s: float = 120.0  # ... with --class short and no --time
    overrun: str = "kill"  # kill | keep: a job that outlives its requested time
    overrun_grace_s: float = 10.0  # how long past its time a job may run before "kill" applies
    max_ranks: int = 256  # largest rank count a job may ask for
    queue_type: str = "lbd"  # queue type asked of the CPU manager: lbd | local | global
    sample_ms: float = 100.0  # how often partitions are sampled into the job history
    sched_interval_ms: float = 20.0  # events within this interval share one scheduling pass
    # Energy per job (vmsched/launcher/energy.py): auto = RAPL where readable, else the power model.
    energy_source: str = "auto"  # auto | rapl | model
    rapl_root: str = "/sys/class/powercap"
    power_idle_w: float = 20.0  # the model's P_idle, and the idle power split per CPU on the RAPL path
    power_max_w: float = 60.0  # the model's P_max (all CPUs busy)
    energy_interval_s: float = 1.0  # how often the node's energy is read and split among jobs


@dataclass(frozen=True)
class JobsConfig:
    # After SIGTERM/SIGINT (vmcancel, a time limit, Ctrl-C of vmrun) a job gets this long to end by itself,
    # then its ranks are killed (vmsched/vmruntime/supervisor.py; vmrun and the launcher's shim alike).
    kill_grace_s: float = 3.0


@dataclass(frozen=True)
class MetricsConfig:
    listen: str = ""  # vm-cpumanager's Prometheus endpoint, HOST:PORT (e.g. "127.0.0.1:9469"); "" = off
    launcher_listen: str = ""  # vm-launcher's, e.g. "127.0.0.1:9470"; "" = off


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"  # DEBUG | INFO | WARNING | ERROR, for both daemons (--log-level overrides)


@dataclass(frozen=True)
class SlurmConfig:
    max_mpl: int = 4  # how far a Slurm job step is folded on this node unless it asks (--vm-max-mpl)


@dataclass(frozen=True)
class Config:
    state_dir: Path = field(default_factory=default_state_dir)
    cpumanager: CpuManagerConfig = field(default_factory=CpuManagerConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    source: str = "defaults"  # where the values came from, for status views

    @property
    def instance(self) -> str:
        """Names the shared-memory segment and semaphores; unique per state directory."""
        digest = hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:10]
        return f"vmsched.{digest}"

    @property
    def shm_name(self) -> str:
        return f"/{self.instance}"

    @property
    def lock_name(self) -> str:
        return f"/{self.instance}.lock"

    @property
    def cpumanager_socket(self) -> Path:
        return self.state_dir / "cpumanager.sock"

    @property
    def cpumanager_log(self) -> Path:
        return self.state_dir / "cpumanager.log"

    @property
    def launcher_socket(self) -> Path:
        return self.state_dir / "launcher.sock"

    @property
    def launcher_log(self) -> Path:
        return self.state_dir / "launcher.log"

    @property
    def db_path(self) -> Path:
        return self.state_dir / "vmsched.db"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"


_SECTIONS = {
    "cpumanager": CpuManagerConfig,
    "launcher": LauncherConfig,
    "jobs": JobsConfig,
    "metrics": MetricsConfig,
    "log": LogConfig,
    "slurm": SlurmConfig,
}


def parse_listen(text: str, option: str) -> tuple[str, int] | None:
    """'127.0.0.1:9469' / '[::1]:9469' -> (host, port); '' -> None (off). `option` names it in errors."""
    if text == "":
        return None
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or any(c in host for c in " /[]"):
        raise ConfigError(f'{option}: cannot parse listen address {text!r}: expected HOST:PORT with a port '
                          f'1-65535, e.g. "127.0.0.1:9469" or "[::1]:9469"')  # fmt: skip
    return host, int(port)


def _coerce(cls: type, section: str, values: dict[str, Any]) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"unknown option [{section}] {key}; known: {', '.join(sorted(known))}")
        default = getattr(cls(), key)
        if key == "cpus":
            value = parse_cpu_list(str(value)) if value not in (None, "", "all") else None
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"[{section}] {key} must be true or false, got {value!r}")
        elif isinstance(default, str) and not isinstance(value, str):
            raise ConfigError(f"[{section}] {key} must be a string, got {value!r}")
        elif isinstance(default, int | float) and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"[{section}] {key} must be a number, got {value!r}")
        kwargs[key] = value
    return cls(**kwargs)


def load_config(
    config_file: str | Path | None = None,
    state_dir: str | Path | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Config:
    """Build the configuration; `overrides` are command-line values per section."""
    sdir = Path(state_dir).expanduser().resolve() if state_dir else default_state_dir()
    path = config_file or os.environ.get("VMSCHED_CONFIG")
    data: dict[str, Any] = {}
    source = "defaults"
    if not path and (sdir / "vmsched.toml").exists():
        path = sdir / "vmsched.toml"
    if path:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p}: {e}") from None
        source = str(p)
    if state_dir is None and "state_dir" in data:
        sdir = Path(str(data["state_dir"])).expanduser().resolve()
    sections: dict[str, Any] = {}
    for key in data:
        if key != "state_dir" and key not in _SECTIONS:
            raise ConfigError(f"unknown section or option {key!r} in {source}")
    for name, cls in _SECTIONS.items():
        values = dict(data.get(name, {}))
        values.update({k: v for k, v in (overrides or {}).get(name, {}).items() if v is not None})
        sections[name] = _coerce(cls, name, values)
    cfg = Config(state_dir=sdir, source=source, **sections)
    if cfg.cpumanager.quantum_ms <= 0:
        raise ConfigError("quantum_ms must be > 0")
    cm = cfg.cpumanager
    if cm.lbd_ip_quanta < 1 or cm.lbd_window_cpu_ms <= 0 or cm.lbd_remeasure_quanta < 1:
        raise ConfigError("lbd_ip_quanta and lbd_remeasure_quanta must be >= 1, lbd_window_cpu_ms > 0")
    if cm.lbd_placement_margin < 0:
        raise ConfigError("lbd_placement_margin must be >= 0")
    if not 0 <= cm.lbd_behind_share < 1:
        raise ConfigError("lbd_behind_share must be >= 0 and < 1")
    if not 0 <= cm.lbd_uneven_load < 1:
        raise ConfigError("lbd_uneven_load must be >= 0 and < 1")
    if cfg.cpumanager.default_queue not in ("lbd", "local", "global"):
        raise ConfigError("default_queue must be lbd, local or global")
    if cfg.slurm.max_mpl < 1:
        raise ConfigError("[slurm] max_mpl must be >= 1")
    if cfg.launcher.queue_type not in ("lbd", "local", "global"):
        raise ConfigError("[launcher] queue_type must be lbd, local or global")
    if cfg.jobs.kill_grace_s <= 0:
        raise ConfigError("[jobs] kill_grace_s must be > 0")
    if cfg.launcher.overrun not in ("kill", "keep"):
        raise ConfigError("[launcher] overrun must be kill or keep")
    cpm, lm = (parse_listen(cfg.metrics.listen, "[metrics] listen"),
               parse_listen(cfg.metrics.launcher_listen, "[metrics] launcher_listen"))  # fmt: skip
    if cpm is not None and cpm == lm:
        raise ConfigError("[metrics] listen and launcher_listen must differ: each daemon serves its own endpoint")
    if cfg.log.level.upper() not in LEVELS:
        raise ConfigError(f"[log] level must be one of {', '.join(LEVELS)}, got {cfg.log.level!r}")
    if cfg.launcher.energy_source not in ("auto", "rapl", "model"):
        raise ConfigError("[launcher] energy_source must be auto, rapl or model")
    if not 0 <= cfg.launcher.power_idle_w <= cfg.launcher.power_max_w or cfg.launcher.energy_interval_s <= 0:
        raise ConfigError("[launcher] need 0 <= power_idle_w <= power_max_w and energy_interval_s > 0")
    try:
        from vmsched.launcher.policy.config import parse_policy_spec

        parse_policy_spec(cfg.launcher.policy)
    except ValueError as e:
        raise ConfigError(f"[launcher] policy: {e}") from None
    return cfg
