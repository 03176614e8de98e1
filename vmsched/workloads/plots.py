"""PNG plots of runs and comparisons (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from vmsched.workloads.metrics import RelativePerformance, Segment, Summary, busy_cpus

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PathLike_ = str | PathLike[str]


def pyplot():  # noqa: ANN201 (matplotlib.pyplot, a module)
    """matplotlib.pyplot on the Agg backend, imported on first use: the import takes about 0.9 s, which
    every command that imports this module (vmsim, vmreplay, ...) paid even to print a usage error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: PathLike_) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out


def plot_relative_cdf(rel: RelativePerformance | Sequence[RelativePerformance], path: PathLike_) -> Path:
    """CDF of per-job response-time ratios b / a (log x axis); left of 1 the jobs b did better."""
    rels = [rel] if isinstance(rel, RelativePerformance) else list(rel)
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for r in rels:
        x, y = r.cdf()
        x = [max(v, 1e-6) if v != float("inf") else 1e6 for v in x]
        ax.step(x[:1] + x, [0.0] + y, where="post", label=f"{r.label_b} / {r.label_a}")
    if rels:
        tol = rels[0].tolerance
        ax.axvspan(1 - tol, 1 + tol, color="0.85", label=f"equal (±{tol:.0%})")
    ax.axvline(1.0, color="0.3", linewidth=0.8)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("response time ratio (b / a), per job")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("relative performance")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_response_by_class(summaries: Mapping[str, Summary], path: PathLike_) -> Path:
    """Grouped bars: mean response time per class (all, long, short) for each run."""
    classes: list[str] = []
    for s in summaries.values():
        classes += [c for c in s.classes if c not in classes]
    fig, ax = pyplot().subplots(figsize=(max(6.0, 1.5 * len(classes) * max(1, len(summaries)) / 2), 4.5))
    width = 0.8 / max(1, len(summaries))
    for k, (label, s) in enumerate(summaries.items()):
        values = [(s.classes[c].mean_response or 0.0) if c in s.classes else 0.0 for c in classes]
        xs = [i + (k - (len(summaries) - 1) / 2) * width for i in range(len(classes))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(classes)), classes)
    ax.set_ylabel("mean response time (s)")
    ax.set_title("response time per class")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def plot_utilization(segments: Sequence[Segment], cpus: int, path: PathLike_) -> Path:
    """CPUs in use over time, against the machine size."""
    times, busy = busy_cpus(segments)
    fig, ax = pyplot().subplots(figsize=(8, 3.5))
    if times:
        origin = times[0]
        ax.step([t - origin for t in times], busy, where="post", label="CPUs in use")
        ax.fill_between([t - origin for t in times], busy, step="post", alpha=0.3)
    ax.axhline(cpus, color="red", linewidth=0.8, linestyle="--", label=f"{cpus} CPUs")
    ax.set_ylim(0, max([cpus, *busy]) * 1.1 if busy else cpus * 1.1)
    ax.set_xlabel("time since first job start (s)")
    ax.set_ylabel("CPUs")
    ax.set_title("utilization over time")
    ax.legend(loc="upper right")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_partitions(segments: Sequence[Segment], cpus: int, path: PathLike_) -> Path:
    """Partitions over time: a Gantt chart per CPU when every segment names its CPUs, otherwise the CPUs
    held by each job stacked over time."""
    fig, ax = pyplot().subplots(figsize=(9, max(3.0, 0.5 * cpus + 2)))
    jobs = sorted({s.job_id for s in segments})
    colors = pyplot().get_cmap("tab20")
    color = {j: colors(i % 20) for i, j in enumerate(jobs)}
    origin = min((s.start for s in segments), default=0.0)
    if segments and all(s.cpu_ids is not None for s in segments):
        for s in segments:
            for cpu in s.cpu_ids or ():
                ax.broken_barh([(s.start - origin, s.end - s.start)], (cpu - 0.4, 0.8), color=color[s.job_id])
                if s.end - s.start > 0:
                    ax.text(
                        (s.start + s.end) / 2 - origin,
                        cpu,
                        str(s.job_id),
                        ha="center",
                        va="center",
                        fontsize=7,
                    )
        ax.set_yticks(range(cpus), [f"CPU {c}" for c in range(cpus)])
        ax.set_ylim(-0.6, cpus - 0.4)
    else:
        cuts = sorted({s.start for s in segments} | {s.end for s in segments})
        held = {job: [0.0] * max(0, len(cuts) - 1) for job in jobs}
        for s in segments:
            for i in range(bisect_left(cuts, s.start), bisect_left(cuts, s.end)):
                held[s.job_id][i] += s.cpus
        lefts = [c - origin for c in cuts[:-1]]
        widths = [b - a for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        bottom = [0.0] * len(lefts)
        for job in jobs:
            label = f"job {job}" if len(jobs) <= 20 else None
            ax.bar(lefts, held[job], widths, bottom, align="edge", color=color[job], edgecolor="none", label=label)
            bottom = [b + h for b, h in zip(bottom, held[job], strict=True)]
        ax.axhline(cpus, color="red", linewidth=0.8, linestyle="--")
        ax.set_ylabel("CPUs held (stacked by job)")
        if 0 < len(jobs) <= 20:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ax.set_xlabel("time (s)")
    ax.set_title("partitions over time")
    return _save(fig, path)
