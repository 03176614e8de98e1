"""Hardware against simulation: a vmreplay run and a vmsim run of the same workload and policy, job by
job. Jobs are matched by submission order (the replay's job ids are the launcher's, not the trace's).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vmsched.launcher.replay import slug
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.metrics import JobRecord, records_from_swf
from vmsched.workloads.plots import pyplot
from vmsched.workloads.report import TextTable, fmt, markdown
from vmsched.workloads.swf import read_swf


@dataclass(frozen=True)
class Agreement:
    jobs: int
    mean_measured: float
    mean_simulated: float
    mean_error: float  # (simulated - measured) / measured, of the mean response
    spearman: float
    per_job: tuple[tuple[int, float, float], ...]  # (trace order, measured, simulated) response times


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank (as Spearman's rho needs)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (statistics.correlation(method="ranked") needs Python 3.12)."""
    if len(a) < 2:
        return float("nan")
    try:
        return statistics.correlation(ranks(a), ranks(b))
    except statistics.StatisticsError:
        return float("nan")  # a constant series


def agreement(measured: Sequence[JobRecord], simulated: Sequence[JobRecord]) -> Agreement:
    if len(measured) != len(simulated):
        raise WorkloadError(
            f"the replay has {len(measured)} jobs, the simulation {len(simulated)}: not the same workload"
        )
    m = sorted(measured, key=lambda r: (r.submit, r.id))
    s = sorted(simulated, key=lambda r: (r.submit, r.id))
    return _of_responses([r.response for r in m], [r.response for r in s])


def _of_responses(rm: Sequence[float], rs: Sequence[float]) -> Agreement:
    """The Agreement of measured and simulated response times, job by job in submission order."""
    mean_m, mean_s = statistics.fmean(rm), statistics.fmean(rs)
    return Agreement(len(rm), mean_m, mean_s, (mean_s - mean_m) / mean_m, spearman(rm, rs),
                     tuple((i + 1, a, b) for i, (a, b) in enumerate(zip(rm, rs, strict=True))))  # fmt: skip


def pooled(agreements: Sequence[Agreement]) -> Agreement:
    """Several replays of one workload and policy against their simulations, as one: each job's mean
    response over the replays against its mean over the simulations (the mean error and Spearman's rho
    of those). For a policy whose replays differ from each other by more than the comparison is judged
    by (a saturated queue amplifies the node's drift in speed), one pair says little."""
    if not agreements or len({ag.jobs for ag in agreements}) != 1:
        raise WorkloadError("pooled agreement needs replays of one workload (the same number of jobs)")
    rm = [statistics.fmean(ag.per_job[i][1] for ag in agreements) for i in range(agreements[0].jobs)]
    rs = [statistics.fmean(ag.per_job[i][2] for ag in agreements) for i in range(agreements[0].jobs)]
    return _of_responses(rm, rs)


def report(name: str, ag: Agreement) -> str:
    head = TextTable(
        f"{name}: measured (vmreplay) against simulated (vmsim) response times",
        ("jobs", "mean measured (s)", "mean simulated (s)", "error of the mean", "Spearman rho"),
        ((str(ag.jobs), fmt(ag.mean_measured), fmt(ag.mean_simulated), f"{100 * ag.mean_error:+.1f}%",
          f"{ag.spearman:.3f}"),),
    )  # fmt: skip
    rows = tuple((str(i), fmt(a), fmt(b), f"{100 * (b - a) / a:+.1f}%" if a > 0 else "-") for i, a, b in ag.per_job)
    per_job = TextTable("per job, in submission order", ("job", "measured (s)", "simulated (s)", "error"), rows)
    return markdown([head, per_job])


def plot(name: str, ag: Agreement, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    xs, ys = [a for _, a, _ in ag.per_job], [b for _, _, b in ag.per_job]
    ax1.scatter(xs, ys, s=12)
    top = max([*xs, *ys, 1.0])
    ax1.plot([0, top], [0, top], color="grey", linewidth=0.8, linestyle="--", label="simulated = measured")
    ax1.set_xlabel("measured response (s)")
    ax1.set_ylabel("simulated response (s)")
    ax1.set_title(f"rho {ag.spearman:.3f}, mean error {100 * ag.mean_error:+.1f}%")
    ax1.legend(loc="upper left")
    errors = [100 * (b - a) / a for _, a, b in ag.per_job if a > 0]
    ax2.hist(errors, bins=min(30, max(5, len(errors) // 3)))
    ax2.set_xlabel("per-job error of the simulated response (%)")
    ax2.set_ylabel("jobs")
    fig.suptitle(name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_with_replay(replay_dir: Path, name: str, simulated: Sequence[JobRecord], out: Path) -> str:
    """Write out/vs_replay.md and vs_replay.png; return the markdown."""
    result = replay_dir / slug(name) / "result.swf"
    if not result.exists():
        raise WorkloadError(f"no replay of policy {name} here (expected {slug(name)}/result.swf)", replay_dir)
    ag = agreement(records_from_swf(read_swf(result)), simulated)
    text = report(name, ag)
    (out / "vs_replay.md").write_text(text + "\n")
    plot(name, ag, out / "vs_replay.png")
    return text
