"""Text reports of metrics, comparisons and characterizations: rich tables for a terminal, markdown for files.

Every report is first built as plain :class:`TextTable` data, then rendered either way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.table import Table

from vmsched.workloads.characterize import CLASSES, Characterization
from vmsched.workloads.metrics import RelativePerformance, Share, Summary

_NUMERIC = re.compile(r"[-+]?[\d,.]*%?(/\d+)?|-|inf")


@dataclass(frozen=True)
class TextTable:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def rich(self) -> Table:
        table = Table(title=self.title, title_justify="left")
        for i, h in enumerate(self.headers):
            numeric = all(_NUMERIC.fullmatch(row[i]) for row in self.rows if i < len(row))
            table.add_column(h, justify="right" if numeric and i > 0 else "left")
        for row in self.rows:
            table.add_row(*row)
        return table

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.headers) + " |"]
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(self.headers) - 1)) + "|")
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        return "\n".join(lines) + "\n"


def fmt(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _tau(t: float) -> str:
    return f"{t:g}"


def summary_tables(summary: Summary, title: str = "run") -> list[TextTable]:
    """Overall figures, per-class metrics, and the turnaround every ``step`` jobs."""
    overall = TextTable(
        f"{title}: overall",
        ("metric", "value"),
        (
            ("jobs", fmt(summary.jobs)),
            ("CPUs", fmt(summary.cpus)),
            ("makespan (s)", fmt(summary.makespan)),
            ("utilization", pct(summary.utilization)),
            (
                "throughput (jobs/h)",
                fmt(None if summary.throughput is None else summary.throughput * 3600, 2),
            ),
            ("CPU-seconds", fmt(summary.cpu_seconds)),
            ("energy (kJ)", fmt(None if summary.energy_j is None else summary.energy_j / 1000, 2)),
        ),
    )
    headers = ["class", "jobs", "wait", "exec", "resp mean", "resp geo", "resp std", "slowdown"]
    for t in summary.taus:
        headers += [f"BSLD{_tau(t)}", f"BSLD{_tau(t)} nofloor", f"PP-BSLD{_tau(t)}"]
    headers += ["late", "tardiness", "CPU-s"]
    rows = []
    for name, c in summary.classes.items():
        row = [
            name,
            fmt(c.jobs),
            fmt(c.mean_wait),
            fmt(c.mean_execution),
            fmt(c.mean_response),
            fmt(c.geomean_response),
            fmt(c.std_response),
            fmt(c.mean_slowdown, 2),
        ]
        for t in summary.taus:
            row += [
                fmt(c.mean_bounded_slowdown[t], 2),
                fmt(c.mean_bounded_slowdown_nofloor[t], 2),
                fmt(c.mean_pp_bounded_slowdown[t], 2),
            ]
        late = f"{c.late_jobs}/{c.jobs_with_deadline}" if c.jobs_with_deadline else "-"
        row += [late, fmt(c.total_tardiness) if c.jobs_with_deadline else "-", fmt(c.cpu_seconds)]
        rows.append(tuple(row))
    per_class = TextTable(
        f"{title}: per class (times in s, means; BSLD has the max(1, .) floor, 'nofloor' has not)",
        tuple(headers),
        tuple(rows),
    )
    steps = TextTable(
        f"{title}: turnaround step by step",
        ("jobs", "mean response", "cumulative mean", "all done after (s)"),
        tuple(
            (
                f"{s.first}-{s.last}",
                fmt(s.mean_response),
                fmt(s.cumulative_mean_response),
                fmt(s.completed_after),
            )
            for s in summary.turnaround
        ),
    )
    return [overall, per_class, steps]


def _share_row(label: str, share: Share) -> tuple[str, ...]:
    return (
        label,
        fmt(share.jobs),
        pct(share.better),
        pct(share.equal),
        pct(share.worse),
        fmt(share.geomean_ratio, 3),
    )


def relative_tables(rel: RelativePerformance) -> list[TextTable]:
    """Better / equal / worse shares of ``b`` against ``a``: overall, per class, and by thirds."""
    headers = ("jobs", "n", f"{rel.label_b} better", "equal", f"{rel.label_b} worse", "geo-mean ratio")
    rows = [_share_row("all", rel.overall)]
    rows += [_share_row(name, share) for name, share in rel.by_class.items()]
    top = TextTable(
        f"relative performance of {rel.label_b} vs {rel.label_a} "
        f"(ratio = response {rel.label_b} / response {rel.label_a}, equal within ±{rel.tolerance:.0%})",
        headers,
        tuple(rows),
    )
    third_rows = []
    for attribute, thirds in rel.thirds.items():
        for third in thirds:
            span = f"{fmt(third.low, 0)}..{fmt(third.high, 0)}" if third.share.jobs else ""
            label = f"{attribute} {third.part} {span}".rstrip()
            third_rows.append(_share_row(label, third.share))
    split = TextTable(f"by thirds of the jobs (attributes from {rel.label_a})", headers, tuple(third_rows))
    return [top, split]


def comparison_table(summaries: Mapping[str, Summary]) -> TextTable:
    """Mean wait, execution and response per class for several runs of one workload (one row per run)."""
    classes: list[str] = []
    for s in summaries.values():
        classes += [c for c in s.classes if c not in classes]
    headers = ["run"]
    for c in classes:
        headers += [f"{c} wait", f"{c} exec", f"{c} resp"]
    headers += ["makespan", "utilization", "energy kJ"]
    rows = []
    for label, s in summaries.items():
        row = [label]
        for c in classes:
            cs = s.classes.get(c)
            row += [fmt(cs.mean_wait), fmt(cs.mean_execution), fmt(cs.mean_response)] if cs else ["-", "-", "-"]
        row += [fmt(s.makespan), pct(s.utilization), fmt(None if s.energy_j is None else s.energy_j / 1000, 2)]
        rows.append(tuple(row))
    return TextTable("comparison (means, seconds)", tuple(headers), tuple(rows))


def characterization_tables(ch: Characterization) -> list[TextTable]:
    total = sum(ch.counts.values())
    head = TextTable(
        "job classes (L: <= median, H: > median; size first, then run time)",
        ("item", "value"),
        (
            ("jobs considered (run >= 1 s, size >= 1)", fmt(ch.jobs)),
            ("jobs left out", fmt(ch.excluded)),
            ("median size (processors)", f"{ch.median_size:g}"),
            ("median run time (s)", f"{ch.median_runtime:g}"),
            *((c, f"{ch.counts[c]} ({100 * ch.counts[c] / total:.2f}%)") for c in CLASSES),
            ("merge threshold (points)", f"{ch.threshold:g}"),
            ("calendar", ch.start),
        ),
    )
    tables = [head]
    for day, groups in ch.weekdays.items():
        rows = tuple(
            (str(i), g.interval, fmt(g.jobs), *(f"{g.percent[c]:.2f}" for c in CLASSES))
            for i, g in enumerate(groups, start=1)
        )
        tables.append(TextTable(day, ("i", "hours", "jobs", *(f"%{c}" for c in CLASSES)), rows))
    return tables


def markdown(tables: Sequence[TextTable]) -> str:
    return "\n".join(t.markdown() for t in tables)
