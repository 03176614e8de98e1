"""Plots are real PNG files; reports carry the figures they are given."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.image
from rich.console import Console

from vmsched.workloads import plots
from vmsched.workloads.metrics import JobRecord, Segment, relative_performance, summarize
from vmsched.workloads.report import comparison_table, markdown, relative_tables, summary_tables

A = [
    JobRecord(1, 0, 0, 100, 2, 2, 150, "long", deadline=90),
    JobRecord(2, 10, 100, 120, 2, 2, 30, "short"),
    JobRecord(3, 20, 120, 140, 1, 1, 30, "short"),
]
B = [
    JobRecord(1, 0, 0, 120, 2, 2, 150, "long", deadline=90),
    JobRecord(2, 10, 10, 30, 2, 1, 30, "short"),
    JobRecord(3, 20, 20, 40, 1, 1, 30, "short"),
]


def _png_size(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def test_every_plot_writes_a_png(tmp_path: Path) -> None:
    sa, sb = summarize(A, cpus=2), summarize(B, cpus=2)
    rel = relative_performance(A, B, label_a="fcfs", label_b="fjt")
    gantt = [Segment(1, 0, 50, 2, (0, 1)), Segment(1, 50, 100, 1, (0,)), Segment(2, 50, 120, 1, (1,))]
    stacked = [Segment(1, 0, 50, 2), Segment(1, 50, 100, 1), Segment(2, 50, 120, 1)]
    outputs = [
        plots.plot_relative_cdf(rel, tmp_path / "cdf.png"),
        plots.plot_relative_cdf(
            [rel, relative_performance(B, A, label_a="fjt", label_b="fcfs")], tmp_path / "cdf2.png"
        ),
        plots.plot_response_by_class({"fcfs": sa, "fjt": sb}, tmp_path / "resp.png"),
        plots.plot_utilization(stacked, 2, tmp_path / "util.png"),
        plots.plot_partitions(gantt, 2, tmp_path / "gantt.png"),
        plots.plot_partitions(stacked, 2, tmp_path / "sub" / "stacked.png"),
        plots.plot_utilization([], 2, tmp_path / "empty.png"),
    ]
    for path in outputs:
        width, height = _png_size(path)
        assert width > 300 and height > 200


def test_reports_carry_the_figures() -> None:
    s = summarize(A, cpus=2)
    text = markdown(summary_tables(s, "fcfs"))
    assert "**fcfs: overall**" in text
    assert "| makespan (s) | 140.0 |" in text
    assert "| utilization | 92.9% |" in text  # 200 + 40 + 20 CPU-s over 2 CPUs x 140 s
    assert "| long | 1 | 0.0 | 100.0 | 100.0 |" in text
    assert "1/1" in text  # the long job missed its deadline
    rel = relative_performance(A, B, label_a="fcfs", label_b="fjt")
    rel_text = markdown(relative_tables(rel))
    assert "| all | 3 | 66.7% | 0.0% | 33.3% |" in rel_text
    assert "size lower 1..1" in rel_text
    comp = comparison_table({"fcfs": s, "fjt": summarize(B, cpus=2)}).markdown()
    assert "| fjt |" in comp and "short resp" in comp
    console = Console(file=io.StringIO(), width=200)
    for table in summary_tables(s) + relative_tables(rel):
        console.print(table.rich())
    assert "BSLD10" in console.file.getvalue()
