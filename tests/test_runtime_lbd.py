"""LBD end to end: the runtime's context-switch counts and the ranks' CPU times lead the CPU manager
to keep send.50x6 (imbalanced) on the global queue and to move a balanced app to local queues, and
the decision with its figures shows in the status view and the manager's log. A job whose pattern
changes is decided again: imbalanced then balanced moves to local queues; balanced then imbalanced
moves to the global queue at its next periodic re-measure (or by a local trial that the change caught).
The rule itself: tests/test_lbd.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmsched.cpumanager.lbd import LbdParams, too_sparse
from vmsched.vmruntime.testing import Manager, run_following, vmrun_cmd


def send_cmd(variant: str, seconds: float, heavy_s: str | None = None) -> list[str]:
    """send.S for `seconds`, its ranks heavy only in `heavy_s` ('A:B' seconds into the run) where given.
    Sized in seconds, not iterations: the detector's windows count the ranks' CPU seconds, so phases
    counted in iterations gave them less time on a faster node (the imbalance-ends job, sized for an
    older node in iterations, ran 2.5 s on this one and failed 5 runs of 19, 2026-11-28)."""
    cmd = [sys.executable, "-m", "vmsched.apps.send", "-c", "S", "--variant", variant, "--seconds", str(seconds)]
    return cmd + (["--heavy-s", heavy_s] if heavy_s else [])  # not ":": mpiexec's MPMD separator


def run_watched(manager: Manager, job_id: int, app: list[str],
                verified: str = '"verified": true') -> tuple[list[dict], list[tuple[str, float, str]]]:  # fmt: skip
    """Run the app folded (4 ranks, MPL 2) under the LBD; the job's status entries seen while it ran
    and its decisions from the manager's log, (queue, IP, why) in order. `verified`: what the app's
    last line says when its result is right."""
    cmd = vmrun_cmd(manager.state_dir, 4, 2, app, queue="lbd", job_id=job_id)
    proc = subprocess.Popen(cmd, env=manager.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[dict] = []
    while proc.poll() is None:
        jobs = [j for j in manager.status()["jobs"] if j["job"] == job_id]
        if jobs:
            seen.append(jobs[0])
        time.sleep(0.02)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert verified in out.strip().splitlines()[-1], out[-2000:]
    assert seen and seen[0]["queue"] == "global"  # every LBD job starts on the global queue
    return seen, decisions_in(manager.log_path.read_text(), job_id)


def decisions_in(log_text: str, job_id: int) -> list[tuple[str, float, str]]:
    """The job's LBD decisions in the manager's log, (queue, IP, why) in order."""
    hits = re.findall(rf"action=lbd_decision job={job_id} cvcs=[0-9.]+ ip=([0-9.e-]+) queue=(\w+) decision=\d+ "
                      r"why=(\w+)", log_text)  # fmt: skip
    return [(q, float(ip), why) for ip, q, why in hits]


def until_remeasure(lines: list[str], job_id: int) -> list[str]:
    """The log up to the job's first re-measure: what its first decisions and trials did. A long stretch of
    outside load on this VM can still make a steady job's progress fall at two watch reads in a row (lbd.py,
    "Watching a local job"), and the job then measures and decides afresh; the checks below are on what
    came before. (The periodic re-measure, 30 s on, comes after these jobs' end.)"""
    ends = [i for i, x in enumerate(lines) if f"action=lbd_remeasure job={job_id} " in x]
    return lines[: ends[0]] if ends else lines


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    """A manager that re-measures local jobs every 30 s: these jobs run up to 12 s, and the default 10 s
    re-measured the balanced one near its end in 1 run of 8 (a window misread at 15 %, a failed reverse
    trial, no time left for the re-checks). Re-measuring: remeasuring_manager below."""
    config: Path = tmp_path_factory.mktemp("lbd") / "vmsched.toml"
    config.write_text("[cpumanager]\nlbd_remeasure_quanta = 3000\n")
    with Manager(cpus="0-1", extra=("--config", str(config))) as m:
        yield m


# send.50x6 was decided global 0.6-0.7 s into its run (2026-11-29, 3 runs: the window, then its reverse
# trial); a balanced send.S local 0.1-0.2 s in, with time left for the re-checks that correct a first
# window misread (as 150 iterations, some 5 s on an older node, did not leave in 1 run of about 20).
# In this node's slow spells both come later: send.50x6 settled 1.45-1.82 s after its admission (6 runs),
# and 2.0 s ended one run during its reverse trial; a balanced send.S whose local trial was misread went
# back to local queues 2.56 s in (1 run of 8, 2026-12-06), and CI's run of 2.5 s ended on the global queue.
SECONDS_50X6, SECONDS_BALANCED = 3.5, 4.0


@pytest.mark.parametrize(("job", "variant", "seconds", "expected"),
                         [(540, "50x6", SECONDS_50X6, "global"), (750, "0x1", SECONDS_BALANCED, "local")],
                         ids=["send.50x6", "balanced"])  # fmt: skip
def test_lbd_decision(manager: Manager, job: int, variant: str, seconds: float, expected: str) -> None:
    seen, decisions = run_watched(manager, job, send_cmd(variant, seconds))
    why = lbd_lines(manager, job)
    decided = [j for j in seen if j["lbd"] == "decided"]
    assert decided, f"no decision while the job ran (last: {seen[-1]})"
    if expected == "local" and decisions and decisions[-1][::2] == ("global", "global_faster"):
        # Decided local, then measured faster on the decided global queue by its global trial: the trial's
        # figures must show it (global_margin more calls per second), as in the global trial's own test
        # below. A balanced send.S runs as fast on either queue (whole runs: global / local 1.02), and its
        # 0.3-s trials read global / local 0.66-1.12 (20 runs, 2026-12-03), over the margin in CI once
        # (5c870da: [('local', 0.0293, 'idleness'), ('global', 0.0293, 'global_faster')]).
        assert_global_trial_by_margins(why, job)
        decisions = decisions[:-1]
    else:
        assert decided[-1]["queue"] == expected, (decided[-1], why)
    # The last decision is the right one. An imbalanced job goes local only for its reverse trial, which
    # local queues fail (its light ranks burn their waits there); a balanced one may be misread once on
    # a loaded machine and is then moved by the global queue's re-checks ([('local', 0.1199,
    # 'reverse_trial'), ('global', 0.1199, 'local_slower')] and no re-check window clearly below the
    # threshold twice before the end, when the job was shorter).
    assert decisions and decisions[-1][0] == expected, why
    # Local by its IP, or by a reverse trial of a window misread as imbalanced (IP 13 % in 1 run of 10 on
    # this node), which local queues then passed; global always by an IP at or over the threshold.
    _, last_ip, last_why = decisions[-1]
    by_ip = last_ip < 0.10 if expected == "local" else last_ip >= 0.10
    assert by_ip or (expected == "local" and last_why == "reverse_trial"), why
    if expected == "global":
        assert all(ip >= 0.10 for _, ip, _ in decisions), why
        ip = decisions[0][1]
        if decisions[0][2] == "sparse_calls":
            # A window that read it too sparse in calls for any trial (its 50-ms phases put its rate near the
            # bound: 1 run of 3 in bench/lbd.py, 2026-12-05) leaves it on the global queue at once.
            assert decisions == [("global", ip, "sparse_calls")], why
            assert_under_the_bound(why, job)
        else:  # tried on local queues by its reverse trial, which they fail
            assert decisions == [("local", ip, "reverse_trial"), ("global", ip, "local_slower")], why


@pytest.fixture(scope="module")
def remeasuring_manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    """A manager that re-measures local jobs every 1.5 s (the default 10 s is longer than these jobs)."""
    config: Path = tmp_path_factory.mktemp("lbd") / "vmsched.toml"
    config.write_text("[cpumanager]\nlbd_remeasure_quanta = 150\n")
    with Manager(cpus="0-1", extra=("--config", str(config))) as m:
        yield m


def test_lbd_decides_again_when_the_imbalance_ends(manager: Manager) -> None:
    # Imbalanced for 1.5 s (decided global 0.6-0.7 s in), then balanced for 4.5 s: some 10 re-check
    # windows; on a loaded node a balanced send.S reads 4-13 % per window on the global queue, so a move
    # needs a few of them (it came 0.5-0.7 s after the imbalance ended, 3 runs; the third window after
    # it in 12 of 12, 2026-12-03). In iterations, 30 and 270 ran 2.5 s on a faster node and failed 5 runs
    # of 19: the imbalance ended before the reverse trial did, which then kept local queues, or the
    # balanced part before the re-checks had moved the job. With 3 s balanced, CI saw no move in 1 run
    # (5c870da; its re-check windows were not logged in the failure, as they are now).
    seen, decisions = run_watched(manager, 601, send_cmd("50x6", 6.0, "0:1.5"))
    why_ = lbd_lines(manager, 601)
    # Imbalanced at first: a reverse trial on local queues, which they fail; or, where its window read it too
    # sparse in calls for a trial, the global queue at once (see test_lbd_decision).
    assert decisions[0][1] >= 0.10, why_
    if decisions[0][2] == "sparse_calls":
        assert decisions[0][0] == "global", why_
        assert_under_the_bound(why_, 601)
        after = decisions[1:]
    else:
        assert decisions[0][2] == "reverse_trial", why_
        assert decisions[1][:1] == ("global",) and decisions[1][2] == "local_slower", why_
        after = decisions[2:]
    moved = [(ip, why) for q, ip, why in after if q == "local"]
    # Decided again: on a window below the band, or after band_windows in it (then by a local trial).
    assert moved, why_
    ip, why = moved[0]
    assert ip < 0.10 - 0.03 or (why == "band_trial" and ip < 0.10), why_
    # The status view showed it. (A local trial that measures local queues slower may send it back.)
    assert "local" in {j["queue"] for j in seen if j["lbd"] == "decided"}


def test_lbd_decides_again_when_an_imbalance_starts(remeasuring_manager: Manager) -> None:
    m = remeasuring_manager
    # Balanced for 2.5 s first: a balanced send.S may read just above the threshold in its first window
    # (0.1045 in 1 run of 10), and its reverse trial then keeps it global; the re-check windows that
    # follow move it to local queues before the imbalance starts. Shorter, they had not in 2 CI runs
    # (2026-11-28: [('local', 0.1045, 'reverse_trial'), ('global', 0.1045, 'local_slower')]): its only
    # local decision was that trial's. In this node's slow spells they did not in 2.5 s either (1 run of 5,
    # 2026-12-06: first window 10.9 %); a run that never went local by its IP, which this test is not about
    # (test_lbd_decision is), is run again, up to 3 runs. Then imbalanced for 5 s: the re-measure that reads it
    # came 1.5 or 3 s after the first decision, the move to the global queue some 0.5 s later (3 runs,
    # 2026-11-29); in slow spells the local trial that follows a re-measure read just before the imbalance
    # runs until it holds its calls, and the move came 1.1-2.6 s after the onset (9 runs, 2026-12-06): with
    # 2.5 s imbalanced, 2 runs of 7 ended before it.
    for job in (602, 612, 622):
        seen, decisions = run_watched(m, job, send_cmd("50x6", 7.5, "2.5:"))
        why_ = lbd_lines(m, job)
        if any(q == "local" and why in ("idleness", "band_trial") for q, _, why in decisions):
            break
    # Balanced: on local queues, and re-measured there (every 1.5 s here).
    assert any(q == "local" and why in ("idleness", "band_trial") for q, _, why in decisions), why_
    assert re.search(rf"action=lbd_remeasure job={job} ", m.log_path.read_text()), why_
    # Imbalanced: back to the global queue. By a re-measure window that read it too sparse in calls for a
    # trial (see test_lbd_decision), or because local queues were measured slower: by the reverse trial of a
    # re-measure window that read the imbalance, or by a local trial that its start caught (a trial behind
    # runs until it holds 200 calls per rank).
    (q1, ip1, why1), (q2, ip2, why2) = decisions[-2:]
    if why2 == "sparse_calls":
        assert (q1, q2) == ("local", "global"), why_
        assert_under_the_bound(why_, job, last=True)
    else:
        assert (q1, q2, why2) == ("local", "global", "local_slower") and ip1 == ip2, why_
        # The window's cut: the plain threshold for a job on the global queue; a re-measure of a local job
        # keeps it local up to threshold + hysteresis (lbd.py, lbd_step). CI read 0.1024 at a re-measure,
        # which stayed local by idleness and then failed its trial (2026-12-06).
        p = LbdParams()
        cut = p.threshold + p.hysteresis if len(decisions) > 2 and decisions[-3][0] == "local" else p.threshold
        assert (why1 == "reverse_trial" and ip1 >= cut) or (why1 in ("idleness", "band_trial") and ip1 < cut), why_
    assert [j for j in seen if j["lbd"] == "decided"][-1]["queue"] == "global"


def past_one_misread(decisions: list[tuple[str, float, str]]) -> list[tuple[str, float, str]]:
    """The decisions from the second local one on where a first local trial was misread: on a loaded node
    that sends the job back to the global queue once, and its re-check windows bring it back (lbd.py:
    "Two strikes"). CI read the ring so twice, on 20e8a4f and 24c637c, e.g. [('local', 0.0294, 'idleness'),
    ('global', 0.0294, 'local_slower'), ('local', 0.0525, 'idleness')]. A second misread is not skipped."""
    if len(decisions) > 2 and decisions[1][::2] == ("global", "local_slower") and decisions[2][0] == "local":
        return decisions[2:]
    return decisions


def fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def lbd_lines(manager: Manager, job_id: int) -> str:
    """The job's LBD lines in the manager's log (decisions, trials, re-checks, re-measures): what a failed
    assertion shows, so that a failure in CI says which windows and trials led there."""
    lines = manager.log_path.read_text().splitlines()
    return "\n".join(x for x in lines if "action=lbd_" in x and f" job={job_id} " in x)


def assert_under_the_bound(text: str, job_id: int, last: bool = False) -> None:
    """The job's first (`last`: last) `sparse_calls` decision in these log lines logged a rate under the bound
    (lbd.py, "Too sparse for a trial"; 4 ranks on 2 CPUs): the detector's own `too_sparse` on that rate."""
    lines = [x for x in text.splitlines() if f"action=lbd_decision job={job_id} " in x and "why=sparse_calls" in x]
    assert lines, text
    rate = float(fields(lines[-1 if last else 0])["calls_per_cpu_s_global"])
    assert rate > 0 and too_sparse(rate, 1.0, 4, 2, LbdParams()), text  # per CPU second: `rate` calls in 1 s


def global_trials(text: str, job_id: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The job's global trials in these log lines: (lost, won), each the figures its line logged."""
    lines = text.splitlines()
    lost = [fields(x) for x in lines if f"action=lbd_trial job={job_id} queue=global kept=false" in x]
    won = [fields(x) for x in lines if f"action=lbd_decision job={job_id} " in x and "why=global_faster" in x]
    return lost, won


def assert_global_trial_by_margins(text: str, job_id: int) -> None:
    """Every global trial of the job in these log lines was judged by the detector's own margins: won
    where it made `global_margin` more calls per second than the local trial and at least `wall_floor` of
    its calls per CPU second, lost otherwise; and one lost before `trial_min_quanta` (the shortest a trial
    runs to its end) was `trial_margin` behind per second (over early: clearly behind)."""
    p = LbdParams()
    lost, won = global_trials(text, job_id)
    for trial in lost + won:
        wall, wall_local = float(trial["calls_per_s_decided"]), float(trial["calls_per_s_local"])
        cpu, cpu_local = float(trial["calls_per_cpu_s_decided"]), float(trial["calls_per_cpu_s_local"])
        faster = wall > (1 + p.global_margin) * wall_local and cpu >= p.wall_floor * cpu_local
        assert (trial in won) == faster, (trial, text)
        if trial in lost and int(trial["quanta"]) < p.trial_min_quanta:
            assert int(trial["quanta"]) >= p.glance_quanta and wall < (1 - p.trial_margin) * wall_local, (trial, text)


@pytest.mark.parametrize(("job", "pattern", "iters"), [
    # Balanced (IP 0.6-10 %), its local trial keeps local queues. On the decided global queue it ran 1.17x
    # faster than on local queues at one time of day on this node (1.60 s against 1.88 s) and as fast at
    # another (2.04 s against 2.03 s, 2026-11-29): the trial's figures decide, as asserted here.
    (801, "halo-persist", 60000),
    # A ring runs 6-11x slower there on this node (its local trial 470-850k calls per second, its global one
    # 76-115k): clearly behind at its first look. CI read it as fast there once (115k against 109k, its
    # local trial as slow as the global queue): then it runs its full length, and the margins decide.
    (802, "ring", 150000),
], ids=["halo-persist", "ring"])  # fmt: skip
def test_a_kept_local_trial_is_followed_by_a_trial_of_the_decided_global_queue(
    manager: Manager, patterns: Path, job: int, pattern: str, iters: int
) -> None:
    seen, _ = run_watched(manager, job, [str(patterns), pattern, str(iters), "1"], '"ok": true')
    everything = manager.log_path.read_text().splitlines()
    lines = until_remeasure(everything, job)
    text = "\n".join(lines)
    decisions = past_one_misread(decisions_in(text, job))
    lost, won = global_trials(text, job)
    kept = [x for x in lines if f"action=lbd_trial job={job} queue=local kept=true" in x]
    why = lbd_lines(manager, job)
    # Local queues first, kept by their trial; then one global trial, whose figures decide.
    assert decisions and decisions[0][0] == "local" and len(kept) == 1, why
    # Busy from their first quanta, both decide in their quick window (lbd.py, "Quick window"), unless it read them
    # imbalanced: it was read either way (the manager gave it the ranks' calls and CPU times).
    first = next(x for x in lines if f"action=lbd_decision job={job} " in x)
    quick = [x for x in lines[: lines.index(first)] if f"action=lbd_quick_window job={job} " in x]
    assert first.endswith(" quick=true") or (quick and " read=true" in quick[0]), why
    assert len(lost) + len(won) == 1, why
    trial = (won or lost)[0]
    wall, wall_local = float(trial["calls_per_s_decided"]), float(trial["calls_per_s_local"])
    # The detector's own margins (this test read 1.05 and 0.9 after global_margin had become 0.15: a trial
    # 5-15 % ahead, which the detector rightly left local, failed it in 6 runs of 16 on halo-persist).
    assert_global_trial_by_margins(text, job)
    final = None if len(lines) < len(everything) else [j for j in seen if j["lbd"] == "decided"][-1]["queue"]
    assert_refell_only(everything, job)
    if won:
        assert decisions[-1][::2] == ("global", "global_faster") and final in ("global", None), why
    else:
        assert all(q == "local" for q, _, _ in decisions) and final in ("local", None), why
    if pattern == "ring":
        p = LbdParams()
        assert lost, why
        if wall < (1 - p.trial_margin) * wall_local:  # clearly behind: over at its first looks (2 quanta here)
            assert int(trial["quanta"]) < p.trial_min_quanta, trial
        else:  # not behind by the margin: to its end
            assert int(trial["quanta"]) >= p.trial_min_quanta, trial


def test_a_local_job_whose_pace_drifts_is_re_measured_at_once(tmp_path: Path, patterns: Path) -> None:
    """drift (bench/patterns.c): two halves of the ranks, balanced for the first quarter of the rounds (some
    1 s here), drift apart on local queues. Decided local, the job's watch finds its pace under half its
    trial's, per second and per CPU second, and re-measures it long before its periodic re-measure (30 s
    here; the job runs some 4 s). On this node: first windows at IP 1.3-6.6 %, re-measured 110-130 quanta
    after the local decision, its reads at 0.04-0.05 of its trial's pace (8 runs, 2026-12-03). Drifting
    from the first round, its first window read 11-17 % and it went local only by a reverse trial, which
    CI once read as failed (local queues already slower), and the job never went local. In r mod P (no
    placement trial): the halves (even and odd ranks) are then one per CPU, and the fast one runs ahead;
    in a block placement, which its trial kept once in CI at 1.13x (2026-12-04), each CPU holds one rank
    of each half and the job's pace did not fall under half.

    The drift itself does not always come: the same job held on local queues (no detector) ran 4.7, 8.5, 9.6
    and 21.1 s (2026-12-06), and one run here, 5 s long, never fell under half its trial's pace; a job
    that went local and was not re-measured is run again, up to 4 times."""
    config = tmp_path / "vmsched.toml"
    config.write_text("[cpumanager]\nlbd_remeasure_quanta = 3000\nlbd_placement_trial = false\n")
    with Manager(cpus="0-1", extra=("--config", str(config))) as manager:
        for job in (804, 814, 824, 834):
            seen, decisions = run_watched(manager, job, [str(patterns), "drift", "100000", "1"], '"ok": true')
            lines = [x for x in manager.log_path.read_text().splitlines() if f" job={job} " in x]
            why = lbd_lines(manager, job)
            assert decisions and decisions[0][0] == "local", why  # balanced at first
            if any(f"action=lbd_remeasure job={job} " in x for x in lines):
                break
    assert any(f"action=lbd_remeasure job={job} " in x for x in lines), why
    assert_refell_only(lines, job)  # why=progress_fell, both rates under half the trial's
    watched = until_remeasure(lines, job)
    assert any(f"action=lbd_trial job={job} queue=local kept=true" in x for x in watched), why


def test_without_the_global_trial_a_kept_local_trial_is_the_last_word(tmp_path: Path, patterns: Path) -> None:
    """`lbd_global_trial = false` in the configuration: the detector as before the global trial."""
    config = tmp_path / "vmsched.toml"
    config.write_text("[cpumanager]\nlbd_remeasure_quanta = 3000\nlbd_global_trial = false\n")
    with Manager(cpus="0-1", extra=("--config", str(config))) as m:
        seen, _ = run_watched(m, 803, [str(patterns), "ring", "150000", "1"], '"ok": true')
        everything = m.log_path.read_text().splitlines()
    assert not any("action=lbd_trial job=803 queue=global" in x for x in everything)
    assert_refell_only(everything, 803)
    lines = until_remeasure(everything, 803)
    decisions = decisions_in("\n".join(lines), 803)
    assert [q for q, _, _ in past_one_misread(decisions)] == ["local"], [x for x in everything if " job=803 " in x]
    # One kept local trial (a failed one is the local_slower decision skipped above), and nothing after it.
    assert sum("action=lbd_trial job=803 queue=local kept=true" in x for x in lines) == 1, lines
    if len(lines) == len(everything):
        assert [j for j in seen if j["lbd"] == "decided"][-1]["queue"] == "local"


def assert_refell_only(lines: list[str], job_id: int) -> None:
    """A re-measure of these short jobs can only be a fall in progress, logged with the rates that show it:
    the read under half the trial's per second and per CPU second of the job (lbd.py, "Outside load is no
    fall")."""
    for x in lines:
        if f"action=lbd_remeasure job={job_id} " in x:
            f = fields(x)
            assert f["why"] == "progress_fell" and float(f["calls_per_s"]) < 0.5 * float(f["calls_per_s_local"]), x
            assert float(f["calls_per_cpu_s"]) < 0.5 * float(f["calls_per_cpu_s_local"]), x  # not outside load


@pytest.mark.parametrize("trial", [True, False])
def test_on_one_cpu_the_detector_tries_the_global_queue_and_the_table_follows(tmp_path: Path, patterns: Path,
                                                                            trial: bool) -> None:  # fmt: skip
    """4 ranks of alltoall folded onto one CPU: decided local at once (`one_cpu`), then tried against the global
    queue by segments, local, global, global, local; the job's entry reads the queues in turn during the
    trial, and at its end the queue the trial chose by the detector's margins (a decision where it is the
    global queue). `lbd_queue_trial = false`: local queues from the decision on, no trial."""
    config = tmp_path / "vmsched.toml"
    config.write_text(f"[cpumanager]\nlbd_remeasure_quanta = 3000\nlbd_queue_trial = {str(trial).lower()}\n")
    with Manager(cpus="0", extra=("--config", str(config))) as m:
        cmd = vmrun_cmd(m.state_dir, 4, 4, [str(patterns), "alltoall", "20000", "1"], queue="lbd", job_id=806)
        done, queues = run_following(m, cmd, 806, "queue", decided=True)
        assert done.returncode == 0, done.stderr
        assert '"ok": true' in done.stdout.strip().splitlines()[-1], done.stdout[-2000:]
        text, why = m.log_path.read_text(), lbd_lines(m, 806)
    decisions = decisions_in(text, 806)
    trials = [fields(x) for x in why.splitlines() if "action=lbd_trial job=806 " in x]
    assert decisions[0][::2] == ("local", "one_cpu"), why
    if not trial:
        assert len(decisions) == 1 and not trials and queues == ["local"], (queues, why)
        return
    # The run (some 1-2 s) ends before a second trial (30 s on): one trial, logged as a trial that kept local
    # queues or as the decision for the global queue, with each queue's calls per second over its segments.
    assert len(decisions) + len(trials) == 2, why
    p = LbdParams()
    if trials:
        assert trials[0]["one_cpu"] == "true" and trials[0]["kept"] == "false", why
        local, glob = float(trials[0]["calls_per_s_local"]), float(trials[0]["calls_per_s_decided"])
        assert int(trials[0]["segments"]) % 4 == 0, why
        # Kept local: not block_margin ahead, or a round the global queue did not lead (not logged apart).
        assert glob <= local * (1 + p.block_margin) or int(trials[0]["rounds_lost"]) > 0, why
    else:
        assert decisions[1][::2] == ("global", "global_faster"), why
        f = fields(next(x for x in why.splitlines() if "why=global_faster" in x))
        assert float(f["calls_per_s_decided"]) > float(f["calls_per_s_local"]) * (1 + p.block_margin), why
    assert queues[:2] == ["local", "global"], (queues, why)  # the trial's second segment, at least 40 ms
    assert queues[-1] == ("local" if trials else "global"), (queues, why)


@pytest.mark.parametrize("sparse", [True, False], ids=["default", "sparse_global_off"])
def test_a_job_that_calls_mpi_seldom_stays_on_the_global_queue_untried(tmp_path: Path, patterns: Path,
                                                                      sparse: bool) -> None:  # fmt: skip
    """An all-to-all whose ranks compute some 20 ms between exchanges (bench/patterns.c at work 10,000;
    balanced): some 30 MPI calls per CPU second of its ranks, too few for any trial of it to hold
    `window_calls` calls per rank (lbd.py: "Too sparse for a trial"). Its window decides the global queue,
    logged with its rate, and nothing tries local queues. `lbd_sparse_global = false`: local queues, as the
    window read it. (Not a ring: at this grain a ring's CVCS had not settled by its end, 4 runs of 4.)"""
    config = tmp_path / "vmsched.toml"
    config.write_text(f"[cpumanager]\nlbd_remeasure_quanta = 3000\nlbd_sparse_global = {str(sparse).lower()}\n")
    with Manager(cpus="0-1", extra=("--config", str(config))) as m:
        seen, decisions = run_watched(m, 807, [str(patterns), "alltoall", "30", "10000"], '"ok": true')
        why = lbd_lines(m, 807)
    if not sparse:
        assert decisions and decisions[0][0] == "local", why  # by idleness, or by a reverse trial
        assert all(w != "sparse_calls" for _, _, w in decisions), why
        return
    assert [(q, w) for q, _, w in decisions] == [("global", "sparse_calls")], why
    assert_under_the_bound(why, 807)
    assert "action=lbd_trial" not in why, why
    assert {j["queue"] for j in seen} == {"global"}, why
