"""Energy per job on a shared node: the node's energy, measured (RAPL) or modelled, split among its jobs.

Node energy, per interval of the launcher's energy meter (`energy_interval_s`, default 1 s):
- RAPL, where the node exposes it (`<rapl_root>/intel-rapl:N/energy_uj`, root path configurable): the sum
  of the top-level zones' counters (packages; their subzones `intel-rapl:N:M` are parts of them and not
  added; a `psys` zone, which covers the whole platform, is used alone when present). A counter that wraps
  at its `max_energy_range_uj` is unwrapped.
- otherwise the power model P(u) = P_idle + (P_max - P_idle) * u, u = the fraction of the node's CPUs held
  by job partitions during the interval.

Split, from each job's CPU-seconds in the interval (its partition size integrated over time):
- idle: the interval's idle energy min(E, P_idle * dt) is split per CPU; a job gets 1/ncpus of it for each
  CPU its partition held (pro rata of time); the idle energy of CPUs no job held stays with the node
  ("unattributed");
- the rest of E goes to the jobs that ran in the interval, in proportion to their CPU-seconds in it (with
  no job running, it is unattributed too).
The jobs' energies plus the unattributed energy are the node's energy, exactly. Under the model a job's
energy is P_max / ncpus per CPU-second it held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

Segments = Sequence[tuple[float, int]]  # (time, partition size from then on), in time order


def model_power(p_idle: float, p_max: float, utilization: float) -> float:
    """P(u) = P_idle + (P_max - P_idle) * u, in watts (u in [0, 1])."""
    return p_idle + (p_max - p_idle) * min(1.0, max(0.0, utilization))


def cpu_seconds_between(segments: Segments, t0: float, t1: float) -> float:
    """CPU-seconds of a piecewise-constant partition size within [t0, t1)."""
    total = 0.0
    for (start, cpus), nxt in zip(segments, [*segments[1:], None], strict=True):
        end = nxt[0] if nxt is not None else t1
        lo, hi = max(start, t0), min(end, t1)
        if hi > lo:
            total += cpus * (hi - lo)
    return total


def split_energy(energy_j: float, dt: float, ncpus: int, p_idle: float,
                 cpu_s: Mapping[int, float]) -> tuple[dict[int, float], float]:  # fmt: skip
    """One interval's node energy split among jobs by the rule above: ({job: J}, unattributed J)."""
    held = sum(cpu_s.values())
    if energy_j <= 0 or dt <= 0:
        return {j: 0.0 for j in cpu_s}, max(0.0, energy_j)
    idle = min(energy_j, p_idle * dt)
    dynamic = energy_j - idle
    per_cpu_s = idle / (ncpus * dt)
    shares = {j: per_cpu_s * c + (dynamic * c / held if held > 0 else 0.0) for j, c in cpu_s.items()}
    return shares, energy_j - sum(shares.values())


def model_energy(dt: float, ncpus: int, p_idle: float, p_max: float, held_cpu_s: float) -> float:
    """The model's node energy over an interval in which partitions held `held_cpu_s` CPU-seconds."""
    return p_idle * dt + (p_max - p_idle) * held_cpu_s / ncpus


class RaplReader:
    """Reads the node's cumulative energy from a powercap tree (the only place that touches it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        names = {z: _read_text(z / "name") for z in zones}
        psys = [z for z in zones if names[z] == "psys"]
        self.zones = psys or zones
        self.last: dict[Path, int] = {}
        self.total_uj = 0

    def available(self) -> bool:
        return bool(self.zones) and all(_read_int(z / "energy_uj") is not None for z in self.zones)

    def read_joules(self) -> float:
        """Joules consumed since the first read (0 at the first)."""
        for z in self.zones:
            now = _read_int(z / "energy_uj")
            if now is None:
                continue
            before = self.last.get(z)
            if before is not None:
                span = _read_int(z / "max_energy_range_uj") or 0
                self.total_uj += now - before if now >= before else now + span - before
            self.last[z] = now
        return self.total_uj / 1e6


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text is not None and text.isdigit() else None


class EnergyMeter:
    """The node's energy per interval: RAPL where readable (unless the model is asked for), else the model."""

    def __init__(self, source: str, rapl_root: str, p_idle: float, p_max: float) -> None:
        reader = None if source == "model" else RaplReader(Path(rapl_root))
        if reader is not None and not reader.available():
            if source == "rapl":
                raise ValueError(f"energy_source = rapl, but no readable RAPL counters under {rapl_root}")
            reader = None
        self.reader = reader
        self.source = "rapl" if reader else "model"
        self.p_idle, self.p_max = p_idle, p_max
        self.last_j = reader.read_joules() if reader else 0.0

    def interval_energy(self, dt: float, ncpus: int, held_cpu_s: float) -> float:
        """Joules since the last call (RAPL), or the model's for `dt` seconds with `held_cpu_s` CPU-seconds held."""
        if self.reader is None:
            return model_energy(dt, ncpus, self.p_idle, self.p_max, held_cpu_s)
        now = self.reader.read_joules()
        energy, self.last_j = now - self.last_j, now
        return energy
