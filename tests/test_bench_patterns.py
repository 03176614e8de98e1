"""bench/patterns.py on programs of the user's (--command): each runs every way as the patterns do, its
result (--check) is compared with the plain taskset run's, and a program whose result depends on the run
is reported, not averaged. Behaviour only: the times are whatever this node gives."""

from __future__ import annotations

import json
import operator
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, load_script
from vmsched.vmruntime.build import library_path
from vmsched.vmruntime.testing import compile_c_program, mpiexec

BENCH = REPO / "bench" / "patterns.py"


def run_bench(shapes: str, ways: str, *more: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The bench at `shapes` and `ways` (default and taskset run anyway) on runs as short as it allows."""
    return subprocess.run(
        [sys.executable, str(BENCH), "--shapes", shapes, "--ways", ways, "--min-s", "0.05", *more],
        capture_output=True, text=True, timeout=600, cwd=cwd,
    )  # fmt: skip


def verified(row: str) -> bool:
    """Whether a printed row's result column says ok (a run under --min-s may add "short: ..." after it)."""
    return row.split()[9] == "ok" and "BAD" not in row


def test_a_users_program_runs_every_way_and_its_result_is_checked(tmp_path):
    # a ring timed by itself (--time), and a program whose "result" is its rank processes' pids: different
    # in every run, so never verified, and timed by its wall clock less the start-up
    exe = compile_c_program(REPO / "bench" / "patterns" / "patterns.c", tmp_path)
    # One write per rank: print() wrote "pid", " " and the number apart, and the two ranks' pieces interleaved on
    # mpiexec's stdout ('pidpid  9803\n9804\n', CI 2026-12-04): the plain reference run then read BAD too
    pids = f"{sys.executable} -c 'from mpi4py import MPI; import os; os.write(1, f\"pid {{os.getpid()}}\\n\".encode())'"
    r = run_bench(  # on the whole node: no compute job beside the runs (test_work_runs_... below has one)
        "2x2", "local,again",
        "--command", f"cring={exe} ring {{iters}} 0", "--check", r'cring="checksum": "(\w+)"',
        "--time", r'cring="elapsed_s": ([0-9.]+)', "--command-iters", "200",
        "--command", f"pids={pids}", "--check", r"pids=pid (\d+)",
    )  # fmt: skip
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # a result differed: the bench fails
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["cases"] == 2
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith(("cring ", "pids "))}
    assert rows["cring"].split()[1] == "2x2" and " ok" in rows["cring"] and "BAD" not in rows["cring"], r.stdout
    # every way of the pids program differs from its reference run (default, again, local; not taskset itself)
    # Exactly those: a reference run that failed would make taskset BAD as well (this message then shows the
    # rows and, on the bench's stderr, why the run was not ok).
    assert rows["pids"].split("BAD ")[1].split()[0] == "again,default,local", (rows, r.stderr[-2000:])
    assert figures["bad_results"] == 3, (rows, figures["bad_results"], r.stderr[-2000:])
    # the A/A: default against default again, for both programs, as their rows' paired ratios say
    aa = [float(line.split(" again ")[1].split()[0]) for line in r.stdout.splitlines() if "rounds' ratios" in line]
    lo, hi = figures["default_vs_again_paired_range"]
    assert len(aa) == 2 and lo == pytest.approx(min(aa), abs=0.006) and hi == pytest.approx(max(aa), abs=0.006), (
        figures,
        r.stdout,
    )
    # the calibration scaled {iters} up from 200: the ring's own time for 200 laps is well under 1.5 x 0.05 s
    per_way = [line for line in r.stdout.splitlines() if line.lstrip().startswith("cring 2x2 (iters")]
    assert per_way and int(per_way[0].split("(iters ")[1].split(",")[0]) > 200, r.stdout
    # the start-up subtracted from the wall-clock command, measured for each of its ways (again's is default's)
    assert set(figures["startup_s"]) == {"default 2x2", "taskset 2x2", "local 2x2"}, figures


def test_a_result_of_mpichs_algorithms_is_checked_against_the_unfolded_run(tmp_path):
    """fpsum (tests/c/fpsum.c), 8 ranks: plain MPICH's shared-memory Allreduce adds the ranks' values in
    another order than the algorithms the runtime's MPI_Init sets, and the sum rounds differently; every
    vmsched way gives the sum of the unfolded run (the runtime's library, no CPU manager). The bench checks
    the vmsched ways against that run and says so, and the case is ok."""
    exe = compile_c_program(REPO / "tests" / "c" / "fpsum.c", tmp_path)
    plain = subprocess.run([mpiexec(), "-n", "8", str(exe)], capture_output=True, text=True, timeout=120)
    preload = ["-genv", "LD_PRELOAD", str(library_path())]
    mine = subprocess.run([mpiexec(), "-n", "8", *preload, str(exe)], capture_output=True, text=True, timeout=120)
    assert plain.stdout.startswith("sum ") and mine.stdout.startswith("sum "), plain.stderr + mine.stderr
    assert plain.stdout != mine.stdout, "this MPICH sums alike with either algorithm: the case below proves nothing"
    r = run_bench("8x2", "local", "--command", f"fpsum={exe}", "--check", r"fpsum=sum (\S+)")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["bad_results"] == 0 and figures["results_by_runtime_algorithms"] == ["fpsum 8x2"], figures
    row = [line for line in r.stdout.splitlines() if line.startswith("fpsum ")][-1]
    assert " ok (unfolded reference: plain MPICH's result differs)" in row, r.stdout


WRITER = """import sys
from mpi4py import MPI
c = MPI.COMM_WORLD
total = c.allreduce(c.rank + 1)
if c.rank == 0 and sys.argv[1] == "file":  # the result in a file of the current directory, as HPCG writes it
    with open("answer.txt", "w") as f:
        f.write(f"sum {total}\\n")
print("sum 0", flush=True)  # never the result: --result-file reads the file
"""


def test_a_result_written_to_a_file_is_read_from_the_runs_own_directory(tmp_path):
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    r = run_bench(  # on the whole node, as above
        "2x2", "local",
        "--command", f"wfile={sys.executable} {writer} file", "--check", r"wfile=sum (\d+)",
        "--result-file", "wfile=answer*.txt",
        "--command", f"wnone={sys.executable} {writer} none", "--check", r"wnone=sum (\d+)",
        "--result-file", "wnone=answer*.txt",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # wnone wrote no file: BAD in every way
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith(("wfile ", "wnone "))}
    assert " ok" in rows["wfile"] and "BAD" not in rows["wfile"], (rows, r.stderr[-2000:])
    assert rows["wnone"].split("BAD ")[1].split()[0] == "default,local,taskset", rows
    assert "its files answer*.txt: ''" in r.stderr, r.stderr[-2000:]  # why, for the runs that wrote none
    assert sorted(f.name for f in tmp_path.iterdir()) == ["writer.py"]  # every run's directory went


SIZED = """import sys
from mpi4py import MPI
c = MPI.COMM_WORLD
if sys.argv[1] != str(c.size):  # built for another count of ranks, as NPB's IS is: it refuses to run
    sys.exit(f"built for {sys.argv[1]} ranks, run on {c.size}")
if c.rank == 0:
    print(f"ranks {sys.argv[1]} of {c.size}", flush=True)
"""


def test_ranks_in_a_command_is_each_cases_number_of_ranks(tmp_path):
    # a program built for one count of ranks (NPB's is.B.4) is named by it: one --command for every shape,
    # 3 ranks on 2 CPUs among them (folded 2 and 1: the bench asked for 3 CPUs at MPL 1 until 2026-12-07)
    sized = tmp_path / "sized.py"
    sized.write_text(SIZED)
    r = run_bench(  # on the whole node, as above
        "2x2,3x2,4x2", "local",
        "--command", f"sized={sys.executable} {sized} {{ranks}}", "--check", r"sized=ranks (\d+ of \d+)",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("sized ")]
    assert {row.split()[1] for row in rows} == {"2x2", "3x2", "4x2"}, r.stdout
    assert all(verified(row) for row in rows), r.stdout


def test_work_runs_every_pattern_at_that_grain_and_names_its_rows_by_it(tmp_path):
    # --work: the pattern with that much work between its calls, its first count cut as the work grew
    bench = load_script(BENCH)
    exe = tmp_path / "patterns"
    ring, halo = bench.Program("ring", exe, 5000), bench.Program("halo2d", exe, 20)  # own: (20000, 0), (2000, 2)
    assert ring.argv(4) == [str(exe), "ring", "4", "5000"] and ring.label == "ring/w5000"
    assert halo.argv(4) == [str(exe), "halo2d", "286", "20"] and halo.label == "halo2d/w20"
    own = bench.Program("ring", exe)
    assert own.argv(4) == [str(exe), "ring", "20000", "0"] and own.label == "ring"
    assert bench.Program("ep", None, 5000).argv(4)[-2:] == ["--class", "S"]  # an app has no work to set
    # from the command line to the program: its rows name the work, and every result is checked at that grain
    r = run_bench("2x1", "local", "--programs", "ring", "--work", "3")  # with the compute job on the other CPU
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("ring/w3 ")]
    assert rows and all(verified(row) for row in rows), r.stdout


def test_the_vmsched_ways_are_checked_against_the_unfolded_run_where_one_ran():
    bench = load_script(BENCH)
    run = bench.Run
    prog = SimpleNamespace(label="fpsum", iters=0)
    runs = {"default": [run(True, "u", 1.0)] * 2, "local": [run(True, "u", 1.1)] * 2,
            "taskset": [run(True, "p", 2.0)] * 2}  # fmt: skip
    assert bench.folded_differs(runs, {}, None)
    row = bench.make_row(prog, 8, 2, 2, runs, 1.0, run(True, "u", 1.0), None, run(True, "u", 5.0))
    assert row["bad"] == [] and row["unfolded_reference"] and row["reference"] == "taskset"
    # Against it, a vmsched way with yet another result is still bad, and a plain way is checked against the
    # plain run (the calibration's run, default's, too).
    other = {**runs, "local": [run(True, "x", 1.0)] * 2}
    assert bench.make_row(prog, 8, 2, 2, other, 1.0, run(True, "u", 1.0), None, run(True, "u", 5.0))["bad"] == ["local"]
    wrong = bench.make_row(prog, 8, 2, 2, runs, 1.0, run(True, "p", 1.0), None, run(True, "u", 5.0))
    assert wrong["bad"] == ["default"]
    # An unfolded run that failed, or was stopped at the cap, takes nothing off: every vmsched way differs from
    # the plain run.
    for off in (run(False, "u", 5.0), run(True, "", 9.0, capped=True)):
        failed = bench.make_row(prog, 8, 2, 2, runs, 1.0, None, None, off)
        assert failed["bad"] == ["default", "local"] and not failed["unfolded_reference"], off
    # Where every result is the plain run's, there is no unfolded run to make.
    same = {"default": [run(True, "p", 1.0)], "taskset": [run(True, "p", 2.0)]}
    assert not bench.folded_differs(same, {}, None) and bench.folded_differs(same, {}, run(True, "u", 1.0))
    assert not bench.make_row(prog, 8, 2, 1, same, 1.0)["unfolded_reference"]


def test_bad_command_options_are_refused_with_the_reason():
    cases = {
        ("--command", "x=prog"): "needs --check x=REGEX",
        ("--command", "ring=prog", "--check", "ring=a"): "the name of a pattern or app",
        ("--command", "x=prog", "--check", "x=("): "--check x='('",
        ("--command", "x=prog", "--check", "x=a", "--check", "y=b"): "--check y: no --command y",
        ("--command", "x"): "expected NAME=VALUE",
        ("--command", "x=prog", "--check", "x=a", "--result-file", "y=*.txt"): "--result-file y: no --command y",
        ("--command", "x=prog", "--check", "x=a", "--result-file", "x=/etc/*"): "inside the run's directory",
        ("--command", "x=prog", "--check", "x=a", "--result-file", "x=../*.txt"): "inside the run's directory",
        ("--work", "-1"): "--work must be 0 or more, not -1",
        ("--work", "many"): "--work: invalid int value",
    }
    for argv, reason in cases.items():
        r = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and reason in r.stderr, (argv, r.stderr)


def test_paired_ratios_follow_each_round_not_the_medians():
    # Two rounds on a node that slowed down by half between them: default is 5 % slower than local in
    # each round and as fast as taskset. The rounds' ratios say so whatever the drift; a capped way,
    # whose times are bounds, is left out.
    bench = load_script(BENCH)
    run = bench.Run
    runs = {
        "default": [run(True, "c", 1.05), run(True, "c", 1.575)],
        "taskset": [run(True, "c", 1.05), run(True, "c", 1.575)],
        "local": [run(True, "c", 1.0), run(True, "c", 1.5)],
        "progress": [run(True, "c", 0.9), run(True, "c", 2.0)],  # faster in one round, slower in the other
        "timesharing": [run(False, "", 30.0, capped=True)] * 2,
        "again": [run(True, "c", 0.9), run(True, "c", 1.35)],  # default's options, faster by the noise alone
    }
    pr = bench.paired_ratios(runs)
    assert set(pr) == {"taskset", "local", "progress", "again"}
    assert pr["local"] == pytest.approx(1.05) and pr["taskset"] == pytest.approx(1.0)
    assert pr["progress"] == pytest.approx((1.05 / 0.9 + 1.575 / 2.0) / 2, abs=1e-4)  # the median of two
    row = {"seconds": {w: statistics.median(r.seconds for r in rs) for w, rs in runs.items()}, "paired": pr}
    r = bench.ratios(row)
    assert r["default_vs_best_paired"] == pytest.approx(1.05)  # against local, the way default loses most to
    assert r["default_vs_taskset_paired"] == pytest.approx(1.0)
    # the A/A is reported, and never taken for the best way, paired or not
    assert r["default_vs_again_paired"] == pytest.approx(1.05 / 0.9, abs=1e-4)
    assert r["default_vs_best"] == pytest.approx(statistics.median([1.05, 1.575]) / statistics.median([1.0, 1.5]))


def test_the_seconds_default_loses_are_paired_as_its_ratios_are(capsys):
    # A fixed cost: default loses 0.1 s to local in every round, in a case of 1-s runs and in one of 5-s
    # runs. Its ratio falls from 1.1 to 1.02 with the length of the runs, the seconds it loses do not;
    # they are read against the way default loses most to by its ratio, round by round as the ratios are.
    bench = load_script(BENCH)
    run = bench.Run

    def row(base: float) -> dict:
        runs = {
            "default": [run(True, "c", base + 0.1), run(True, "c", 1.5 * base + 0.1)],
            "taskset": [run(True, "c", 2 * base)] * 2,
            "local": [run(True, "c", base), run(True, "c", 1.5 * base)],
            "progress": [run(True, "c", base + 0.2), run(True, "c", 1.5 * base + 0.15)],  # slower than default
            "again": [run(True, "c", base + 0.1), run(True, "c", 1.5 * base + 0.1)],
        }
        return bench.make_row(SimpleNamespace(label="p", iters=1), 4, 2, 2, runs, 1.0)

    short, long = row(1.0), row(5.0)
    assert short["paired_s"]["local"] == pytest.approx(0.1) and long["paired_s"]["local"] == pytest.approx(0.1)
    assert short["paired_s"]["progress"] == pytest.approx(-0.075)  # the median of -0.1 and -0.05
    one = {"default": [run(True, "c", 2.0)], "taskset": [run(True, "c", 0.5)]}
    assert bench.paired_lists(one, op=operator.sub) == {"taskset": [1.5]}  # default - way, not the other way
    assert bench.ratios(short)["default_vs_best_paired"] > bench.ratios(long)["default_vs_best_paired"]
    assert bench.ratios(short)["default_minus_best_paired_s"] == pytest.approx(0.1)
    assert bench.ratios(long)["default_minus_best_paired_s"] == pytest.approx(0.1)
    long["paired_s"]["local"] = 0.3  # the worst case's seconds are the JSON's
    assert bench.report([short, long], None) == 0
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[-1])["default_minus_best_paired_s_worst"] == pytest.approx(0.3)
    assert "default - way, seconds, median of the rounds' differences: taskset " in out and "local +0.100" in out


def test_confirming_rounds_rerun_the_ways_default_loses_to_and_join_their_paired_ratios():
    # Two rounds read default 12 % slower than local; four confirming rounds of default, local and the A/A
    # read it as fast. The pooled median is of all six ratios; a way default is not 1.05x slower than is
    # not re-run; a wrong result in a confirming round fails the case as one in a round does.
    bench = load_script(BENCH)
    run = bench.Run
    runs = {
        "default": [run(True, "c", 1.12), run(True, "c", 1.12)],
        "taskset": [run(True, "c", 1.1), run(True, "c", 1.1)],  # 1.018: under CONFIRM_FROM
        "local": [run(True, "c", 1.0), run(True, "c", 1.0)],
        "again": [run(True, "c", 1.12), run(True, "c", 1.0)],
    }
    assert bench.to_confirm(bench.paired_ratios(runs)) == ["local", "again"]
    assert bench.to_confirm({"taskset": 1.2, "again": 1.3}) == ["taskset", "again"]  # the A/A alone is no reason
    assert bench.to_confirm({"again": 1.3}) == []
    more = {
        "default": [run(True, "c", 1.0)] * 4,
        "local": [run(True, "c", 1.0)] * 4,
        "again": [run(True, "c", 1.0)] * 4,
    }
    pr = bench.paired_ratios(runs, more)
    assert pr["local"] == pytest.approx(1.0)  # median of 1.12, 1.12, 1, 1, 1, 1
    assert pr["taskset"] == pytest.approx(1.12 / 1.1, abs=1e-4)  # the rounds' alone
    assert pr["again"] == pytest.approx(1.0)
    prog = SimpleNamespace(label="ring", iters=10)
    row = bench.make_row(prog, 4, 2, 2, runs, 1.0, None, more)
    assert row["confirmed"] == {"local": 4, "again": 4} and row["bad"] == []
    assert row["seconds"]["default"] == pytest.approx(1.12)  # medians are of the rounds alone
    more["local"] = [*more["local"][:3], run(True, "other", 1.0)]
    assert bench.make_row(prog, 4, 2, 2, runs, 1.0, None, more)["bad"] == ["local"]


def test_every_other_round_runs_the_ways_the_other_way_round():
    # ABBA: with the node slowing down steadily, the way run first in every round would read fastest
    bench = load_script(BENCH)
    ways = ["default", "taskset", "local"]
    assert [bench.round_order(ways, r) for r in range(3)] == [ways, ways[::-1], ways]
    assert ways == ["default", "taskset", "local"]  # the caller's list is left as it was


def test_the_calibration_is_not_compared_but_its_result_is_checked():
    # the rounds' runs alone make the figures; a calibration run with a wrong result still fails the case
    bench = load_script(BENCH)
    run = bench.Run
    prog = SimpleNamespace(label="ring", iters=10)
    runs = {"default": [run(True, "c", 1.0), run(True, "c", 1.2)], "taskset": [run(True, "c", 1.0)] * 2}
    row = bench.make_row(prog, 4, 2, 2, runs, 1.0, run(True, "c", 9.0))
    assert row["seconds"]["default"] == pytest.approx(1.1) and row["range"]["default"] == [1.0, 1.2]
    assert row["bad"] == []
    assert bench.make_row(prog, 4, 2, 2, runs, 1.0, run(True, "other", 1.0))["bad"] == ["default"]
    assert bench.make_row(prog, 4, 2, 2, runs, 1.0, run(False, "c", 1.0))["bad"] == ["default"]


@pytest.mark.parametrize(
    ("n", "k", "coverage"),
    [(4, 1, 0.875), (5, 1, 0.9375), (8, 2, 1 - 2 * 9 / 256), (12, 3, 1 - 2 * 79 / 4096), (16, 5, 1 - 2 * 2517 / 65536)],
)
def test_median_intervals_are_order_statistics_with_their_binomial_coverage(n, k, coverage):
    bench = load_script(BENCH)
    values = [1.0 + i / 100 for i in reversed(range(n))]  # any order
    lo, hi, cov = bench.median_ci(values)
    assert (lo, hi) == (1.0 + (k - 1) / 100, 1.0 + (n - k) / 100)  # the k-th smallest and the k-th largest
    assert cov == pytest.approx(coverage) and (cov >= bench.CI_LEVEL or k == 1)


def test_a_case_is_over_the_bound_beyond_noise_only_where_its_interval_is(capsys):
    # Eight rounds each: default is 12-20 % slower than local in every round (surely over 1.1); against
    # rr it is 2-30 % slower (median 1.15, but its interval reaches under 1.1: maybe over); as fast as the A/A.
    bench = load_script(BENCH)
    run = bench.Run

    def rows(ratios: dict[str, list[float]]) -> dict:
        runs = {"default": [run(True, "c", 1.0)] * 8, "taskset": [run(True, "c", 1.0)] * 8}
        runs |= {w: [run(True, "c", 1.0 / x) for x in xs] for w, xs in ratios.items()}
        return bench.make_row(SimpleNamespace(label="p", iters=1), 4, 2, 8, runs, 1.0)

    sure = rows({"local": [1.12, 1.2, 1.15, 1.18, 1.13, 1.19, 1.16, 1.14], "again": [1.0] * 8})
    maybe = rows({"rr": [1.02, 1.3, 1.15, 1.16, 1.05, 1.2, 1.14, 1.15], "again": [1.0] * 8})
    assert sure["paired_ci"]["local"][:2] == pytest.approx([1.13, 1.19])
    assert maybe["paired_ci"]["rr"][:2] == pytest.approx([1.05, 1.2])
    assert bench.ratios(sure)["default_vs_best_paired_ci"] == pytest.approx((1.13, 1.19))
    assert bench.ratios(maybe)["default_vs_best_paired"] == pytest.approx(1.15)
    assert bench.report([sure, maybe, sure], None) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.splitlines()[-1])
    assert figures["default_vs_best_paired_surely_over_1_1"] == 2
    assert figures["default_vs_best_paired_maybe_over_1_1"] == 1
    assert figures["default_vs_best_paired_geomean"] == pytest.approx((1.155**2 * 1.15) ** (1 / 3), abs=1e-3)
    assert figures["default_vs_again_paired_geomean"] == pytest.approx(1.0)
    assert "rr 1.15 [1.05-1.20]" in out and "[93 % interval]" in out
