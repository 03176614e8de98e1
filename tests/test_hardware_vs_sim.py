"""experiments/hardware_vs_sim.py without hardware: how dedicated runs become vmsim's base times, and the
run-time check against a replay (hand-made result logs, no job is run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, load_script
from vmsched.workloads.params import job_requests, read_params

hw = load_script(REPO / "experiments" / "hardware_vs_sim.py")


def _result(path: Path, rows: list[tuple[float, float, float, int]]) -> None:
    """A vmreplay-style result.swf: (submit, wait, run, processors) per job."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["; Version: 2.2", "; MaxProcs: 2"]
    for i, (submit, wait, run, procs) in enumerate(rows, start=1):
        lines.append(f"{i} {submit} {wait} {run} {procs} -1 -1 {procs} 120 -1 1 -1 -1 -1 2 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")


def test_dedicated_runs_both_layouts(tmp_path: Path) -> None:
    _result(tmp_path / "ep.W@2" / "r0" / "fcfs_fifo" / "result.swf", [(0, 0.03, 10.0, 2)])
    _result(tmp_path / "ep.W@2" / "r1" / "fcfs_fifo" / "result.swf", [(0, 0.03, 12.0, 2)])
    _result(tmp_path / "cg.W" / "fcfs_fifo" / "result.swf", [(0, 0.03, 6.0, 4)])  # the older layout: 4 ranks
    assert hw.read_dedicated(tmp_path) == {("ep.W", 2): [10.0, 12.0], ("cg.W", 4): [6.0], hw.ARRIVAL: [0.03] * 3}


def test_base_times_median_and_folding() -> None:
    samples = {(k, n): [9.0, 10.0, 30.0] for k in hw.KEYS for n in hw.SIZES}  # a disturbed run: median, not mean
    t1 = hw.base_times(samples, lambda key, mpl: 1.25, {"cg.W@1": 7.5})
    assert t1["ep.W@1"] == 10.0 and t1["ep.W@2"] == 10.0
    assert t1["ep.W@4"] == 4.0  # 10 s alone at MPL 2 = T(4) * 2 * s(2): T(4) = 10 / 2.5
    assert t1["cg.W@1"] == 7.5  # given, not measured


def test_base_times_missing_cell_names_it() -> None:
    samples = {(k, n): [1.0] for k in hw.KEYS for n in hw.SIZES if (k, n) != ("mg.W", 1)}
    with pytest.raises(SystemExit, match="mg.W@1"):
        hw.base_times(samples, lambda key, mpl: 1.0, {})


def test_runtime_check_matches_jobs_by_submission_order(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "template.txt").write_text("".join(f"mpiexec -n N python -m vmsched.apps.{k.split('.')[0]} --class W\n"
                                               for k in hw.KEYS))  # fmt: skip
    (work / "allowed_procs.txt").write_text("4 -1 -1 -1 -1 -1 -1\n" * len(hw.KEYS))
    (work / "job_types.txt").write_text("2\n" * len(hw.KEYS))
    # two ep jobs (application 0) and one cg job (application 3)
    (work / "trace.swf").write_text("; Version: 2.2\n; MaxProcs: 2\n1 0 -1 -1 -1 -1 -1 2 -1 -1 -1 -1 -1 0 2 -1 -1 -1\n"
                                    "2 5 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 3 2 -1 -1 -1\n"
                                    "3 9 -1 -1 -1 -1 -1 2 -1 -1 -1 -1 -1 0 2 -1 -1 -1\n")  # fmt: skip
    result = tmp_path / "replay.swf"
    _result(result, [(100.0, 0.0, 11.0, 2), (105.0, 0.1, 8.0, 1), (109.0, 2.0, 13.0, 2)])
    rows = hw.runtime_check(work, result, {("ep.W", 2): 10.0, ("cg.W", 1): 8.0})
    assert rows == [
        {"app": "cg.W", "ranks": 1, "jobs": 1, "replay_median_s": 8.0, "alone_s": 8.0, "error": 0.0},
        {"app": "ep.W", "ranks": 2, "jobs": 2, "replay_median_s": 12.0, "alone_s": 10.0, "error": -0.1667},
    ]


def test_measure_dedicated_runs_every_cell_at_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dedicated step asks vmreplay for each application at each size, reps times, and its output
    layout is what read_dedicated reads (vmreplay itself replaced by a stub that reads the trace)."""
    work = tmp_path / "workload"
    work.mkdir()
    (work / "template.txt").write_text("".join(f"mpiexec -n N python -m vmsched.apps.{k.split('.')[0]} --class W\n"
                                               for k in hw.KEYS))  # fmt: skip
    # as vmworkload generates them: ep and sweep any count up to 4, the others 4, 2 or 1
    (work / "allowed_procs.txt").write_text("4 -1 -1 -1 -1 -1 -1\n" + "4 2 1 1 1 1 1\n" * 3 + "4 -1 -1 -1 -1 -1 -1\n")
    (work / "job_types.txt").write_text("2\n" * len(hw.KEYS))
    calls: list[tuple[str, int]] = []

    def fake_busy_sh(meter: object, foreign: dict[str, float], step: str, *argv: object) -> None:
        ded, out = Path(str(argv[1])), Path(str(argv[-1]))
        reqs = job_requests(read_params(*(ded / n for n in ("template.txt", "allowed_procs.txt", "job_types.txt",
                                                            "trace.swf"))))  # fmt: skip
        if len(reqs) == 1:  # a cell: one job alone, started 0.03 s after its submission
            calls.append((hw.KEYS[reqs[0].app_number], reqs[0].requested_procs))
            _result(out / "fcfs_fifo" / "result.swf", [(0, 0.03, 10.0 + len(calls), reqs[0].requested_procs)])
            return
        # the probe: its jobs back to back, each starting 0.1, 0.2, ... s after the end of the one before
        calls.append(("probe", len(reqs)))
        assert {(hw.KEYS[r.app_number], r.requested_procs) for r in reqs} == {(hw.PROBE_KEY, hw.PROBE_RANKS)}
        rows, t = [], 0.05
        for i, r in enumerate(reqs):
            rows.append((0, t, 6.0, r.requested_procs))
            t += 6.0 + 0.1 * (i + 1)
        _result(out / "fcfs_fifo" / "result.swf", rows)

    monkeypatch.setattr(hw, "busy_sh", fake_busy_sh)
    dedicated = hw.measure_dedicated(tmp_path, work, 2, None, {})
    cells = [(k, n) for k in hw.KEYS for n in hw.SIZES]
    assert calls == ([*cells, ("probe", hw.PROBE_JOBS)]) * 2  # interleaved rounds, each with its probe
    samples = hw.read_dedicated(dedicated)
    assert sorted(samples) == sorted([*cells, hw.ARRIVAL, hw.FINISH])
    assert all(len(samples[c]) == 2 for c in cells)  # the probe's jobs are not run times alone
    assert samples[hw.ARRIVAL] == pytest.approx([0.03] * 2 * len(cells))
    assert sorted(samples[hw.FINISH]) == pytest.approx(sorted([0.1, 0.2, 0.3] * 2))
    assert hw.latencies(samples) == pytest.approx((0.03, 0.2))
    assert hw.latencies({}) == (0.0, 0.0)


def test_each_policy_gets_the_rounds_around_its_replay(tmp_path: Path) -> None:
    """Bracketing: round0, policy 1, round1, policy 2, round2 - policy 1 is simulated with rounds 0 and 1,
    policy 2 with rounds 1 and 2; without one round around each replay, every policy gets all rounds."""
    for r, secs in enumerate((10.0, 12.0, 20.0)):
        _result(tmp_path / f"round{r}" / "ep.W@2" / "r0" / "fcfs_fifo" / "result.swf", [(0, 0.0, secs, 2)])
    (tmp_path / "roundabout").mkdir()  # not a round
    rounds = hw.read_rounds(tmp_path)
    assert [r.pop(hw.ARRIVAL) for r in rounds] == [[0.0]] * 3  # each run's wait: the launcher's latency
    assert rounds == [{("ep.W", 2): [10.0]}, {("ep.W", 2): [12.0]}, {("ep.W", 2): [20.0]}]
    assert hw.around(rounds, 0, 2) == {("ep.W", 2): [10.0, 12.0]}
    assert hw.around(rounds, 1, 2) == {("ep.W", 2): [12.0, 20.0]}
    assert hw.around(rounds[:2], 1, 2) == {("ep.W", 2): [10.0, 12.0]}
    flat = tmp_path / "flat"
    _result(flat / "ep.W@2" / "r0" / "fcfs_fifo" / "result.swf", [(0, 0.0, 9.0, 2)])
    assert hw.read_rounds(flat) == [{("ep.W", 2): [9.0], hw.ARRIVAL: [0.0]}]


def test_repeated_replays_are_bracketed_in_turn_and_each_gets_its_own_rounds() -> None:
    """--repeat 2 with two policies: P1, P2, P1, P2, each between round k and round k + 1."""
    order = hw.bracketed(2, ["a", "b"])
    assert order == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    rounds = [{("ep.W", 1): [float(r)]} for r in range(len(order) + 1)]
    assert [hw.around(rounds, k, len(order)) for k in range(len(order))] == [
        {("ep.W", 1): [float(k), float(k + 1)]} for k in range(len(order))
    ]
    assert hw.replay_dir(Path("o"), 1, 2) == Path("o/replay1") and hw.replay_dir(Path("o"), 0, 1) == Path("o/replay")


def test_pooled_agreement_compares_each_jobs_mean_over_the_replays() -> None:
    """Two replays that err in opposite directions pool to the mean of each job's responses."""
    from vmsched.sim.compare import Agreement, pooled
    from vmsched.workloads.errors import WorkloadError

    a = Agreement(3, 0, 0, 0, 0, ((1, 10.0, 9.0), (2, 20.0, 22.0), (3, 30.0, 27.0)))
    b = Agreement(3, 0, 0, 0, 0, ((1, 14.0, 11.0), (2, 30.0, 24.0), (3, 40.0, 45.0)))
    pool = pooled([a, b])
    assert pool.per_job == ((1, 12.0, 10.0), (2, 25.0, 23.0), (3, 35.0, 36.0))
    assert pool.mean_measured == pytest.approx(24.0) and pool.mean_simulated == pytest.approx(23.0)
    assert pool.mean_error == pytest.approx(-1 / 24) and pool.spearman == pytest.approx(1.0)
    with pytest.raises(WorkloadError, match="same number of jobs"):
        pooled([a, Agreement(1, 0, 0, 0, 0, ((1, 1.0, 1.0),))])
