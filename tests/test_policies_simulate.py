"""The pure discrete-event driver: every policy runs workloads to completion, the CPU manager never
refuses what a policy admits, and whole-run behaviour (expansion, aborts, shrinking) shows up."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_policies import q
from vmsched.launcher.policy import POLICIES, Start, can_ever_start, parse_policy_spec
from vmsched.launcher.policy.sizes import estimate_at
from vmsched.sim.engine import Latency, folding_runtime, simulate


def _workload(seed: int, n: int = 40, ncpus: int = 8) -> list:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for jid in range(1, n + 1):
        t += rng.expovariate(1 / 15.0)
        cls = rng.choice(["long", "short"])
        procs = rng.choice([(ncpus,), (ncpus, ncpus // 2, 2), tuple(range(ncpus // 2, 0, -1)), (2, 1)])
        est = rng.uniform(100, 300) if cls == "long" else rng.uniform(5, 60)
        jobs.append(q(jid, procs, cls, est=round(est, 1), submit=round(t, 1), deadline=round(t + 4 * est, 1)))
    return jobs


SPECS = [f"{p}{b}" for p in POLICIES for b in ("", "+easy:abort", "+easy:malleable", "+conservative:suspend")]


@pytest.mark.parametrize("spec", SPECS)
def test_every_policy_runs_a_workload_to_the_end(spec):
    jobs = _workload(seed=len(spec))
    # Jobs run 1.5 times longer than estimated, so backfill windows expire.
    records = simulate(jobs, 8, parse_policy_spec(spec), lambda j, n, c: 1.5 * folding_runtime(j, n, c))
    assert [rec.job_id for rec in records] == [j.job_id for j in jobs]
    for rec, job in zip(records, jobs, strict=True):
        assert job.submit_time <= rec.start < rec.end
        assert rec.nranks in job.procs
        assert all(1 <= cpus <= rec.nranks for _, _, cpus in rec.history if cpus)


def test_fcfs_without_backfilling_starts_jobs_in_submission_order():
    records = simulate(_workload(seed=1), 8, parse_policy_spec("fcfs"))
    starts = [rec.start for rec in records]
    assert starts == sorted(starts)
    assert all(rec.history[0][1] == 1 for rec in records)  # rigid, max MPL 1


def test_easy_with_exact_estimates_never_aborts_and_finishes_no_later_than_fcfs():
    jobs = _workload(seed=2)
    exact = simulate(jobs, 8, parse_policy_spec("fcfs+easy:abort"))
    plain = simulate(jobs, 8, parse_policy_spec("fcfs"))
    assert all(rec.aborts == 0 for rec in exact)
    assert any(rec.backfilled for rec in exact)
    assert max(rec.end for rec in exact) <= max(rec.end for rec in plain)


def _underestimated_backfill() -> list:
    # Job 1 holds 6 of 8 CPUs; job 2 (8 ranks) waits; job 3 (2 ranks, "10 s") is backfilled but runs 40 s.
    return [q(1, 6, est=50.0, submit=0.0), q(2, 8, est=50.0, submit=1.0), q(3, 2, est=10.0, submit=2.0)]


def _model(job, nranks, cpus):
    real = 40.0 if job.job_id == 3 else job.estimate
    return real * job.procs[0] / nranks * max(1.0, nranks / cpus)


def test_abort_expiry_kills_requeues_and_still_finishes_the_job():
    records = {
        rec.job_id: rec for rec in simulate(_underestimated_backfill(), 8, parse_policy_spec("fcfs+easy:abort"), _model)
    }
    assert records[3].aborts >= 1
    assert records[3].end > records[2].start  # it ran again after the head


def test_malleable_expiry_shrinks_the_backfilled_job_and_it_finishes_once():
    # Job 1 holds 4 of 8 CPUs until t=50; job 2 (8 or 6 ranks) waits; job 3 (4 ranks, "10 s", really
    # 100 s) is backfilled at t=2 with a window until 12.
    jobs = [q(1, 4, est=50.0, submit=0.0), q(2, (8, 6), est=50.0, submit=1.0), q(3, 4, est=10.0, submit=2.0)]

    def model(job, nranks, cpus):
        return (100.0 if job.job_id == 3 else job.estimate) * max(1.0, nranks / cpus)

    records = {rec.job_id: rec for rec in simulate(jobs, 8, parse_policy_spec("moldable+easy:malleable"), model)}
    assert records[3].aborts == 0 and records[3].backfilled and records[3].start == 2.0
    # At t=12 its window expires: max MPL 4, still on its 4 CPUs while nobody needs them; at t=50 job 2
    # starts with 6 ranks next to it and job 3 shrinks instead of being killed.
    assert records[3].history[:2] == [(2.0, 1, 4), (12.0, 4, 4)]
    assert (50.0, 4, 2) in records[3].history
    assert records[2].start == 50.0 and records[2].nranks == 6


def test_abort_with_underestimates_cannot_starve_a_head_whose_request_exceeds_the_machine():
    # Regression: every job runs 3 times its estimate; backfilled jobs kept taking the CPUs of a head
    # (8 ranks, offers 8 or 4, on 5 CPUs) that held no reservation, and were aborted in turn for ever.
    cfg = parse_policy_spec("moldable+easy:abort/edf")
    jobs = [j for j in _workload(8, n=20) if can_ever_start(j, 5, cfg)]
    records = simulate(jobs, 5, cfg, lambda j, n, c: 3.0 * folding_runtime(j, n, c), max_events=5000)
    assert len(records) == len(jobs)


def test_suspend_expiry_resumes_and_finishes():
    records = {
        rec.job_id: rec
        for rec in simulate(_underestimated_backfill(), 8, parse_policy_spec("fcfs+easy:suspend"), _model)
    }
    assert any(c == 0 for _, _, c in records[3].history)  # it was stopped
    assert records[3].end > records[2].start


def test_fjt_long_job_starts_folded_and_expands_when_the_short_job_ends():
    jobs = [q(1, 1, "short", est=30.0, submit=0.0), q(2, 2, "long", est=100.0, submit=1.0)]
    records = {rec.job_id: rec for rec in simulate(jobs, 2, parse_policy_spec("fjt"))}
    history = records[2].history
    assert history[0] == (1.0, 4, 1)  # started with max MPL 4 on the one free CPU
    assert history[-1] == (30.0, 4, 2)  # expanded when the short job ended


def test_on_decide_sees_every_decision():
    seen = []
    simulate(_workload(seed=3, n=10), 8, parse_policy_spec("asp-max"), on_decide=lambda s, d: seen.extend(d))
    assert sorted(d.job_id for d in seen if isinstance(d, Start)) == list(range(1, 11))


def test_a_job_that_can_never_fit_is_reported():
    with pytest.raises(RuntimeError, match=r"jobs \[1\] can never start"):
        simulate([q(1, 40)], 8, parse_policy_spec("fcfs"))  # would need max MPL 5 > 4


def test_runtime_model_default_is_the_scaled_estimate():
    job = q(1, (8, 4), est=100.0)
    assert estimate_at(job, 4) == 200.0
    assert folding_runtime(job, 8, 2) == 400.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from(SPECS),
    st.sampled_from(["fifo", "sjf", "ljf", "edf"]),
    st.sampled_from([0.5, 1.0, 3.0]),
    st.integers(2, 8),
)
def test_random_workloads_always_complete(seed, spec, order, misestimate, ncpus):
    jobs = [j for j in _workload(seed, n=15, ncpus=8) if can_ever_start(j, ncpus, parse_policy_spec(spec))]
    records = simulate(
        jobs, ncpus, parse_policy_spec(f"{spec}/{order}"), lambda j, n, c: misestimate * folding_runtime(j, n, c)
    )
    assert len(records) == len(jobs)


# -- the launcher's reaction time (engine.Latency) -------------------------------------------------------


def test_latency_delays_each_start_after_a_finish_and_an_arrival_and_keeps_the_real_ends():
    jobs = [q(1, (2,), "short", est=10.0, submit=0.0), q(2, (2,), "short", est=5.0, submit=0.0),
            q(3, (2,), "short", est=7.0, submit=1.0), q(4, (1,), "short", est=3.0, submit=100.0)]  # fmt: skip
    records = simulate(jobs, 2, parse_policy_spec("fcfs"), latency=Latency(arrival=0.03, finish=0.1))
    got = [x for r in records for x in (r.job_id, r.start, r.end, r.cpu_seconds)]
    assert got == pytest.approx([1, 0.03, 10.03, 20.0, 2, 10.13, 15.13, 10.0, 3, 15.23, 22.23, 14.0,
                                 4, 100.03, 103.03, 3.0])  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(SPECS), st.floats(0.0, 5.0), st.floats(0.0, 5.0))
def test_with_any_latency_every_job_finishes_once_and_starts_no_earlier_than_the_driver_can_act(
    seed, spec, arrival, finish
):
    """A finished job keeps its CPUs until the driver acts on its end, and is never resized or rerun
    meanwhile: every job still runs exactly its run time when nothing folds it, and the CPUs held at any
    moment never exceed the machine."""
    cfg = parse_policy_spec(spec)
    jobs = [j for j in _workload(seed, n=15, ncpus=8) if can_ever_start(j, 8, cfg)]
    records = simulate(jobs, 8, cfg, latency=Latency(arrival=arrival, finish=finish))
    assert sorted(r.job_id for r in records) == sorted(j.job_id for j in jobs)
    by_id = {j.job_id: j for j in jobs}
    for r in records:
        assert r.start >= by_id[r.job_id].submit_time + arrival - 1e-9
        if all(cpus == r.nranks for _, _, cpus in r.history):  # never folded: its run time exactly
            assert r.end - r.start == pytest.approx(estimate_at(by_id[r.job_id], r.nranks))
    if cfg.backfill == "none":  # no window to wake it: it acts `arrival` after an arrival or `finish` after an end
        acts = {j.submit_time + arrival for j in jobs} | {r.end + finish for r in records}
        assert all(any(abs(r.start - t) < 1e-6 for t in acts) for r in records)


def test_latency_zero_is_the_ideal_scheduler():
    jobs = _workload(seed=5)
    for spec in ("fcfs+easy:abort", "fjt+easy:malleable", "fcfs+conservative:suspend"):
        cfg = parse_policy_spec(spec)
        assert simulate(jobs, 8, cfg, latency=Latency(0.0, 0.0)) == simulate(jobs, 8, cfg)


@pytest.mark.parametrize("bad", [(-0.1, 0.0), (0.0, -1.0), (float("nan"), 0.0)])
def test_negative_or_nan_latency_is_refused(bad):
    with pytest.raises(ValueError, match="latencies must be seconds >= 0"):
        Latency(*bad)


def test_a_job_whose_window_expires_as_it_ends_is_done_not_rerun_when_the_driver_acts_late():
    """Job 3 is backfilled with a window that ends with it (t=22); with a finish latency the driver sees
    the window expire before it sees the end, and aborts it. As the daemon does, the job counts as
    completed at its real end (lifecycle.ended_before_abort), instead of being requeued and run again."""
    jobs = [q(1, (1,), est=100.0, submit=0.0), q(2, (2,), est=10.0, submit=1.0), q(3, (1,), est=20.0, submit=2.0)]
    got = {r.job_id: (r.start, r.end, r.aborts) for r in
           simulate(jobs, 2, parse_policy_spec("fcfs+easy:abort"), latency=Latency(finish=0.5))}  # fmt: skip
    assert got == {1: (0.0, 100.0, 0), 2: (100.5, 110.5, 0), 3: (2.0, 22.0, 0)}
