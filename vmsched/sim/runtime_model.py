"""The folding cost of a job, measured on this node: pure functions over the fitted curves.

A job of N ranks on P < N CPUs runs at MPL m = N / P. Its folding slowdown is

    s(m) = T(N ranks on P CPUs) / T(P ranks on P CPUs)

so s(1) = 1, and s(m) = 1 is perfect folding: the folded job takes as long as a P-rank run of the same
program (sharing the CPUs costs nothing beyond the sharing itself). `vmsim-calibrate` measures s at the
MPLs of MPL_POINTS for each communication class (the registry's `comm_degree`) and queue type, and
commits the result as runtime_model.json next to this module; `fit` turns its raw runs into curves.

A job whose program is unknown (archive logs) uses the pseudo-class "mixed": the mean of the classes'
slowdowns.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMM_CLASSES = ("low", "medium", "high")
MIXED = "mixed"
QUEUES = ("local", "global")
MPL_POINTS = (1, 2, 4)
FORMAT = "vmsched-runtime-model/1"
DEFAULT_PATH = Path(__file__).with_name("runtime_model.json")

Curve = tuple[float, ...]  # s(m) at each of MPL_POINTS


@dataclass(frozen=True)
class Measurement:
    """One timed run: `seconds` for `app` with `nranks` ranks on `cpus` CPUs under `queue`."""

    app: str
    comm_class: str
    queue: str
    nranks: int
    cpus: int
    seconds: float

    @property
    def mpl(self) -> float:
        return self.nranks / self.cpus

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        """From a raw run record (extra keys such as rep or wall time are ignored)."""
        try:
            m = cls(str(d["app"]), str(d["comm_class"]), str(d["queue"]), int(d["nranks"]), int(d["cpus"]),
                    float(d["seconds"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad measurement {dict(d)!r}: {e!r}") from None
        _check_measurement(m)
        return m


@dataclass(frozen=True)
class RuntimeModel:
    """Fitted curves: curves[comm_class][queue] = s at MPL_POINTS; plus how and where they were made."""

    curves: Mapping[str, Mapping[str, Curve]]
    command: str = ""
    date: str = ""
    host: str = ""
    measurements: tuple[Measurement, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not self.curves:
            raise ValueError("a runtime model needs at least one communication class")
        for cls, by_queue in self.curves.items():
            if cls not in COMM_CLASSES:
                raise ValueError(f"unknown communication class {cls!r}; known: {', '.join(COMM_CLASSES)}")
            if set(by_queue) != set(QUEUES):
                raise ValueError(f"class {cls!r} needs curves for queues {QUEUES}, has {tuple(by_queue)}")
            for queue, curve in by_queue.items():
                ok = len(curve) == len(MPL_POINTS) and all(math.isfinite(s) and s > 0 for s in curve)
                if not ok or curve[0] != 1.0:
                    raise ValueError(f"curve {cls}/{queue} must be {len(MPL_POINTS)} positive numbers starting "
                                     f"with 1.0 (s at MPL {MPL_POINTS}), not {curve!r}")  # fmt: skip


def _check_measurement(m: Measurement) -> None:
    if m.comm_class not in COMM_CLASSES:
        raise ValueError(f"measurement of {m.app}: unknown communication class {m.comm_class!r}")
    if m.queue not in QUEUES:
        raise ValueError(f"measurement of {m.app}: unknown queue {m.queue!r}; known: {', '.join(QUEUES)}")
    if m.cpus < 1 or m.nranks % m.cpus or m.nranks // m.cpus not in MPL_POINTS:
        raise ValueError(f"measurement of {m.app}: {m.nranks} ranks on {m.cpus} CPUs is not an MPL of {MPL_POINTS}")
    if not (math.isfinite(m.seconds) and m.seconds > 0):
        raise ValueError(f"measurement of {m.app}: seconds must be a positive number, not {m.seconds!r}")


def fit(measurements: Iterable[Measurement], command: str = "", date: str = "", host: str = "") -> RuntimeModel:
    """Curves from raw runs: per (app, P, queue, N) the median over repetitions; per app and P the ratio
    T(N = m·P) / T(N = P); per (class, queue, m) the median of those ratios over the apps (and P) of the
    class. Every class measured must have both queues at every MPL of MPL_POINTS."""
    runs = tuple(measurements)
    reps: dict[tuple[str, str, int, str, int], list[float]] = defaultdict(list)
    for m in runs:
        _check_measurement(m)
        reps[(m.comm_class, m.app, m.cpus, m.queue, m.nranks)].append(m.seconds)
    times = {key: statistics.median(v) for key, v in reps.items()}
    ratios: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for (cls, app, cpus, queue, nranks), t in times.items():
        base = times.get((cls, app, cpus, queue, cpus))
        if base is None:
            raise ValueError(f"{app} on {cpus} CPUs, {queue} queue: no run at MPL 1 ({cpus} ranks) to compare with")
        ratios[(cls, queue, nranks // cpus)].append(t / base)
    classes = [c for c in COMM_CLASSES if any(k[0] == c for k in ratios)]
    if not classes:
        raise ValueError("no measurements to fit")
    curves: dict[str, dict[str, Curve]] = {}
    for cls in classes:
        curves[cls] = {}
        for queue in QUEUES:
            missing = [mpl for mpl in MPL_POINTS if not ratios.get((cls, queue, mpl))]
            if missing:
                raise ValueError(f"class {cls!r}, {queue} queue: no measurements at MPL {missing}")
            curves[cls][queue] = tuple(statistics.median(ratios[(cls, queue, mpl)]) for mpl in MPL_POINTS)
    return RuntimeModel(curves, command, date, host, runs)


def _interpolate(curve: Curve, mpl: float) -> float:
    """Piecewise linear through the points; beyond the last one the last segment's slope, but never a
    falling one: a dip measured between the last two points says nothing about higher MPLs."""
    pts = list(zip(MPL_POINTS, curve, strict=True))
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if mpl <= x1:
            return y0 + (y1 - y0) * (mpl - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (mpl - x1)


def slowdown(model: RuntimeModel, comm_class: str, queue: str, mpl: float) -> float:
    """s(mpl): 1.0 at mpl <= 1, else interpolated in the measured curve and never below 1.0 (a folded
    job is not modelled faster than its unfolded self). "mixed" is the mean over the model's classes."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; known: {', '.join(QUEUES)}")
    if not isinstance(mpl, int | float) or math.isnan(mpl):
        raise ValueError(f"mpl must be a number, not {mpl!r}")
    if comm_class == MIXED:
        return statistics.fmean(slowdown(model, c, queue, mpl) for c in model.curves)
    if comm_class not in model.curves:
        known = ", ".join([*model.curves, MIXED])
        raise ValueError(f"no curve for communication class {comm_class!r}; this model has: {known}")
    if mpl <= 1:
        return 1.0
    return max(1.0, _interpolate(model.curves[comm_class][queue], float(mpl)))


def folded_runtime(model: RuntimeModel, base: float, nranks: int, cpus: int, comm_class: str = MIXED,
                   queue: str = "global") -> float:  # fmt: skip
    """Run time on `cpus` CPUs of a job that takes `base` seconds with `nranks` ranks on `nranks` CPUs:
    each CPU carries MPL = nranks / cpus ranks, each folded at the measured cost s(MPL)."""
    if not (isinstance(base, int | float) and math.isfinite(base) and base >= 0):
        raise ValueError(f"base run time must be a finite number >= 0, not {base!r}")
    for name, value in (("nranks", nranks), ("cpus", cpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
    mpl = nranks / cpus
    s = slowdown(model, comm_class, queue, mpl)  # validates class and queue even when unfolded
    return float(base) if cpus >= nranks else base * mpl * s


def model_from_dict(doc: Mapping[str, Any]) -> RuntimeModel:
    """The model in a document written by vmsim-calibrate (ValueError if it is not one)."""
    if not isinstance(doc, Mapping):
        raise ValueError("the top level is not a JSON object")
    if doc.get("format") != FORMAT:
        raise ValueError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
    if list(doc.get("mpl_points", [])) != list(MPL_POINTS):
        raise ValueError(f"mpl_points is {doc.get('mpl_points')!r}, expected {list(MPL_POINTS)}")
    raw = doc.get("curves")
    if not isinstance(raw, Mapping) or not all(isinstance(v, Mapping) for v in raw.values()):
        raise ValueError("'curves' must map each class to {queue: [s at each MPL]}")
    try:
        curves = {c: {q: tuple(float(s) for s in curve) for q, curve in by_q.items()} for c, by_q in raw.items()}
    except (TypeError, ValueError) as e:
        raise ValueError(f"'curves' holds a non-number: {e}") from None
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, Mapping) for r in runs):
        raise ValueError("'runs' must be a list of objects")
    host = doc.get("host", {})
    return RuntimeModel(curves, str(doc.get("command", "")), str(doc.get("date", "")),
                        str(host.get("cpu_model", "") if isinstance(host, Mapping) else host),
                        tuple(Measurement.from_dict(r) for r in runs))  # fmt: skip


def load_model(path: str | Path | None = None) -> RuntimeModel:
    """Read a fitted model; by default the one committed next to this module."""
    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"{p}: cannot read the runtime model: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON: {e}") from None
    try:
        return model_from_dict(doc)
    except ValueError as e:
        raise ValueError(f"{p}: not a runtime model: {e}") from None
