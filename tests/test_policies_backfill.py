"""Backfilling (EASY, conservative), expired windows per action, next_event_time, and property tests
that check the decisions against an independent free-CPU profile written here."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_policies import cfg, q, r, run, snap
from vmsched.cpumanager.partition import JobShape, check_admission, minimum_partition
from vmsched.launcher.policy import (
    QueuedJob,
    RunningJob,
    SetMaxMpl,
    Snapshot,
    Start,
    decide,
    next_event_time,
    parse_policy_spec,
)
from vmsched.launcher.policy.orders import ordered_queue
from vmsched.launcher.policy.profile import FreeProfile, ShadowProfile
from vmsched.launcher.policy.sizes import percentage_offers

# --- the free-CPU profile -------------------------------------------------------------------------


def test_profile_steps_reservations_and_earliest_start():
    p = FreeProfile(0.0, 2, [(10.0, 4), (30.0, 2)])
    assert p.steps() == [(0.0, 2), (10.0, 6), (30.0, 8)]
    assert p.earliest_start(6, 100.0) == 10.0
    assert p.earliest_start(7, 5.0) == 30.0
    assert p.earliest_start(9, 1.0) is None
    p.reserve(10.0, 20.0, 5)
    assert (p.min_free(0.0, 10.0), p.min_free(5.0, 15.0), p.min_free(20.0, 25.0)) == (2, 1, 6)
    assert p.earliest_start(2, 15.0) == 20.0  # 2 free during [0, 10), but only 1 during [10, 20)
    p.release(10.0, 20.0, 5)
    assert p.min_free(0.0, 100.0) == 2 and p.free_at(15.0) == 6


def test_profile_expects_overdue_jobs_right_after_now():
    p = FreeProfile(50.0, 0, [(40.0, 4)])
    assert p.free_at(50.0) == 0
    assert 50.0 < p.earliest_start(4, 1.0) < 50.001


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 8),  # free now
    st.lists(st.tuples(st.integers(0, 60), st.integers(1, 4)), max_size=5),  # releases (end, cpus)
    st.integers(1, 20),  # the head's CPUs
    st.integers(0, 40),  # its duration
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 60)), max_size=4),  # asks and windows (cpus, d)
)
def test_shadow_profile_answers_as_the_step_function(free, releases, head_cpus, head_d, asks):
    """EASY's two-number profile gives FreeProfile's answers: the head's slot, then for jobs of every
    size and duration whether they fit from now, and the spans, as windows from now are taken."""
    now = 20.0
    rel = sorted((float(e), c) for e, c in releases)  # some at or before now: overdue jobs
    ends, cpus = [e for e, _ in rel], [c for _, c in rel]
    full, shadow = FreeProfile.of_sorted(now, free, ends, cpus), ShadowProfile(now, free, ends, cpus)
    start = full.earliest_start(head_cpus, float(head_d))
    assert shadow.reserve_head(head_cpus, float(head_d)) == start
    if start is not None:
        full.reserve(start, start + head_d, head_cpus)
    most = max(free, 0)
    assert shadow.spans(most) == full.spans(most)
    # backfill's two-number form of the spans: inf below `lasting`, the window from there.
    lasting, spans = shadow.lasting(most), full.spans(most)
    assert [math.inf if c < lasting else shadow.shadow - now for c in range(most + 1)] == spans
    for c, d in asks:
        for size in range(0, 10):
            for dur in (0.0, 1.0, float(d), 100.0):
                assert shadow.fits_from_now(size, dur) == full.fits_from_now(size, dur), (size, dur)
        full.reserve(now, now + d, c)
        shadow.reserve(now, now + d, c)


# --- EASY ------------------------------------------------------------------------------------------


def test_easy_backfills_a_job_that_ends_before_the_head_reservation():
    # 10 CPUs; a job holds 8 until t=100; the head needs 10 (reservation at 100).
    s = snap(10, [q(1, 10), q(2, 2, est=50.0), q(3, 2, est=150.0)], [r(9, 8, est=100.0)])
    assert run("fcfs+easy:none", s) == [("start", 2, 2, 1, ("bf", 50.0))]


def test_easy_refuses_a_job_that_would_delay_the_head():
    s = snap(10, [q(1, 10), q(3, 2, est=150.0)], [r(9, 8, est=100.0)])
    assert run("fcfs+easy:none", s) == []


def test_easy_lets_a_long_job_use_cpus_the_head_does_not_need():
    # The head needs 8; at t=100 two CPUs are left over, so a job may run on them past the reservation.
    s = snap(10, [q(1, 8), q(2, 2, est=1000.0)], [r(9, 9, est=100.0)])
    assert run("fcfs+easy:none", s) == []  # only 1 CPU free now
    s = snap(10, [q(1, 8), q(2, 2, est=1000.0)], [r(9, 8, est=100.0)])
    assert run("fcfs+easy:none", s) == [("start", 2, 2, 1, ("bf", 1000.0))]


def test_without_backfilling_nothing_jumps_the_head():
    s = snap(10, [q(1, 10), q(2, 2, est=50.0)], [r(9, 8, est=100.0)])
    assert run("fcfs", s) == []


def test_backfill_window_and_estimate_are_at_the_molded_size():
    s = snap(10, [q(1, 10), q(2, (4, 2), est=30.0)], [r(9, 8, est=100.0)])
    [start] = decide(s, cfg("moldable+easy:abort"))
    assert (start.nranks, start.backfilled, start.estimate, start.window_end) == (2, True, 60.0, 60.0)
    assert "reservation at t=100" in start.reason


def test_easy_with_a_job_bigger_than_the_machine_backfills_freely():
    # 20 ranks on 4 CPUs would need max MPL 5, above the limit of 4: it can never start.
    s = snap(4, [q(1, 20), q(2, 2, est=1000.0)], [r(9, 2, est=100.0)])
    assert run("fcfs+easy:none", s) == [("start", 2, 2, 1, ("bf", 1000.0))]


def test_the_head_reserves_the_largest_shape_that_fits_the_machine():
    # 5 CPUs: the head's request of 8 never fits, its 50 % offer (4) does: that is what is reserved,
    # so a 1000 s job may not take the free CPUs, a 50 s one may.
    running = [r(9, 3, est=100.0)]
    assert run("moldable+easy:abort", snap(5, [q(1, (8, 4, 2)), q(2, 2, est=1000.0)], running)) == []
    [start] = decide(snap(5, [q(1, (8, 4, 2)), q(2, 2, est=50.0)], running), cfg("moldable+easy:abort"))
    assert start.job_id == 2 and "job 1's reservation at t=100" in start.reason


def test_a_job_past_its_estimate_still_protects_the_head():
    # Job 9 should have ended at 100; at 200 it still runs. The head's reservation is "right after now",
    # so nothing may take the CPUs it needs.
    s = snap(10, [q(1, 10), q(2, 2, est=5.0)], [r(9, 8, est=100.0)], now=200.0)
    assert run("fcfs+easy:none", s) == []


def test_easy_sjf_order_reserves_for_the_shortest_job():
    # SJF: job 2 (est 10, needs 10) is the head; job 1 (est 500) would delay it and is not backfilled.
    s = snap(10, [q(1, 2, est=500.0), q(2, 10, est=10.0)], [r(9, 8, est=100.0)])
    assert run("fcfs+easy:none/sjf", s) == []
    assert run("fcfs+easy:none/fifo", s) == [("start", 1, 2, 1)]


def test_fjt_backfills_only_short_jobs():
    # Thesis §6.4.2: the long head (8 ranks, expanded since another long job waits) cannot start; the
    # long job 2 would fit in the 2 free CPUs but only the short job 3 is eligible.
    running = [r(9, 6, est=100.0, cls="short")]
    queue = [q(1, 8, "long"), q(2, 2, "long", est=10.0), q(3, 2, "short", est=10.0)]
    assert run("fjt+easy:abort", snap(8, queue, running)) == [("start", 3, 2, 1, ("bf", 10.0))]


# --- conservative ----------------------------------------------------------------------------------


def _two_reservations() -> Snapshot:
    # 10 CPUs, a job holds 8 until t=100. Job 1 needs 8 (t=100..200, leaving 2 spare); job 2 needs 10
    # (from t=200). Job 3 wants 2 CPUs for 1000 s: fine for job 1, but it would delay job 2.
    return snap(10, [q(1, 8), q(2, 10, est=10.0), q(3, 2, est=1000.0)], [r(9, 8, est=100.0)])


def test_easy_delays_the_second_job_where_conservative_does_not():
    assert run("fcfs+easy:none", _two_reservations()) == [("start", 3, 2, 1, ("bf", 1000.0))]
    assert run("fcfs+conservative:none", _two_reservations()) == []


def test_conservative_backfills_what_delays_no_reservation():
    s = snap(10, [q(1, 8), q(2, 10, est=10.0), q(3, 2, est=90.0)], [r(9, 8, est=100.0)])
    [start] = decide(s, cfg("fcfs+conservative:none"))
    assert (start.job_id, start.backfilled) == (3, True)
    assert "reservations of jobs [1, 2]" in start.reason


def test_conservative_compresses_when_a_job_ends_early():
    # The running job ended early (it is gone from the snapshot): the head starts at once.
    s = snap(10, [q(1, 8), q(2, 2, est=10.0)], [], now=50.0)
    assert run("fcfs+conservative:none", s) == [("start", 1, 8, 1), ("start", 2, 2, 1)]


# --- expired windows -------------------------------------------------------------------------------


def _expired(action: str, **kw):
    # t=150: job 5 was backfilled with a window until 120 and still holds 4 of 8 CPUs; the head needs 8.
    running = [r(5, 4, est=20.0, start=100.0, backfilled=True, window_end=120.0, submit=3.0, **kw)]
    return snap(8, [q(1, 8, submit=1.0), q(2, 4, est=1000.0, submit=2.0)], running, now=150.0)


def test_expiry_abort_kills_and_requeues_then_starts_the_head():
    decisions = decide(_expired("abort"), cfg("fcfs+easy:abort"))
    assert [type(d).__name__ for d in decisions] == ["Abort", "Start"]
    assert decisions[0].requeue and decisions[0].job_id == 5 and "expired" in decisions[0].reason
    assert decisions[1].job_id == 1


def test_expiry_suspend_then_resume_when_the_queue_is_empty():
    assert run("fcfs+easy:suspend", _expired("suspend")) == [("suspend", 5), ("start", 1, 8, 1)]
    later = snap(8, [], [r(5, 4, backfilled=True, window_end=120.0, suspended=True)], now=300.0)
    assert run("fcfs+easy:suspend", later) == [("resume", 5)]


def test_suspended_job_is_resumed_by_backfilling_only_if_it_delays_no_reservation():
    running = [r(9, 4, est=100.0), r(5, 2, est=20.0, backfilled=True, window_end=10.0, suspended=True)]
    s = snap(8, [q(1, 8, est=50.0)], running, now=10.0)
    assert run("fcfs+easy:suspend", s) == [("resume", 5)]  # until t=30, before job 1's reservation at 100
    s = snap(8, [q(1, 8, est=50.0)], [r(9, 4, est=25.0), running[1]], now=10.0)
    assert run("fcfs+easy:suspend", s) == []  # head reserved at t=25; job 5 would need until t=30


def test_expiry_none_leaves_the_job_alone_and_keeps_backfilling():
    assert run("fcfs+easy:none", _expired("none")) == []


def test_expiry_malleable_shrinks_the_job_and_starts_the_head():
    # 4 ranks at max MPL 4 need 1 CPU: the 8-rank head still does not fit, but a 7-rank head would.
    s = _expired("malleable")
    assert run("fcfs+easy:malleable", s) == [("mpl", 5, 4)]
    s7 = Snapshot(s.now, s.ncpus, (q(1, 7, submit=1.0),), s.running)
    assert run("fcfs+easy:malleable", s7) == [("mpl", 5, 4), ("start", 1, 7, 1)]


def test_expiry_malleable_acts_once_and_respects_the_users_cap():
    shrunk = _expired("malleable", max_mpl=4, cpus=1)
    assert run("fcfs+easy:malleable", shrunk) == []
    assert run("fcfs+easy:malleable", _expired("malleable", cap=2)) == [("mpl", 5, 2)]


def test_expired_windows_are_left_alone_when_the_head_can_start():
    s = _expired("abort")
    s4 = Snapshot(s.now, s.ncpus, (q(1, 4, submit=1.0),), s.running)
    assert run("fcfs+easy:abort", s4) == [("start", 1, 4, 1)]


def test_order_rule_thesis_6_4_3_every_running_job_arrived_after_the_head():
    # Window not over by time (t=50 < 120), but the only running job arrived after the head.
    running = [r(5, 4, est=100.0, start=20.0, backfilled=True, window_end=120.0, submit=3.0)]
    s = snap(8, [q(1, 7, submit=1.0)], running, now=50.0)
    assert run("fcfs+easy:malleable", s) == [("mpl", 5, 4), ("start", 1, 7, 1)]  # auto = either
    assert run("fcfs+easy:malleable", s, window_rule="time") == []
    assert run("fcfs+easy:abort", s) == []  # auto = time for abort
    assert run("fcfs+easy:abort", s, window_rule="order") == [("abort", 5), ("start", 1, 7, 1)]
    # A job that arrived before the head is running too: not every job is out of order.
    s2 = snap(8, [q(1, 7, submit=1.0)], [*running, r(0, 1, submit=0.0)], now=50.0)
    assert run("fcfs+easy:malleable", s2) == []


def test_next_event_time_is_the_next_window_to_expire():
    running = [
        r(5, 2, backfilled=True, window_end=120.0),
        r(6, 2, backfilled=True, window_end=90.0),
        r(7, 2, backfilled=True, window_end=40.0),  # past: already due, not a future event
        r(8, 2, backfilled=False),
    ]
    s = snap(8, [q(1, 8)], running, now=50.0)
    assert next_event_time(s, cfg("fcfs+easy:abort")) == 90.0
    assert next_event_time(s, cfg("fcfs+easy:none")) is None
    assert next_event_time(s, cfg("fcfs")) is None
    assert next_event_time(s, cfg("fcfs+easy:abort", window_rule="order")) is None
    shrunk = snap(8, [], [r(5, 8, cpus=2, max_mpl=4, backfilled=True, window_end=120.0)], now=50.0)
    assert next_event_time(shrunk, cfg("fcfs+easy:malleable")) is None


# --- properties against an independent profile -----------------------------------------------------


def _free(jobs: list[tuple[float, float, int]], ncpus: int, t: float) -> int:
    """Free CPUs at time t given (start, end, cpus) occupations; an occupation is [start, end)."""
    return ncpus - sum(c for s, e, c in jobs if s <= t < e)


def _earliest(jobs, ncpus: int, now: float, need: int, dur: float) -> float | None:
    """Earliest t >= now (at now or an occupation's end) with `need` CPUs free during [t, t + dur)."""
    for t in sorted({now, *(e for _, e, _ in jobs if e > now)}):
        points = [t, *(s for s, _, _ in jobs if t < s < t + dur), *(e for _, e, _ in jobs if t < e < t + dur)]
        if all(_free(jobs, ncpus, p) >= need for p in points):
            return t
    return None


def _feasible(jobs, ncpus: int) -> bool:
    return all(_free(jobs, ncpus, p) >= 0 for p in {s for s, _, _ in jobs})


def _occupations(s: Snapshot, decisions) -> tuple[list, list]:
    """Occupations of running jobs plus non-backfill decisions, and of the backfilled starts."""
    mpl = {d.job_id: d.max_mpl for d in decisions if isinstance(d, SetMaxMpl)}
    base = [
        (s.now, r.start_time + r.estimate, minimum_partition(r.nranks, mpl.get(r.job_id, r.max_mpl)))
        for r in s.running
        if not r.suspended
    ]
    bf = []
    for d in decisions:
        if isinstance(d, Start):
            (bf if d.backfilled else base).append((s.now, s.now + d.estimate, minimum_partition(d.nranks, d.max_mpl)))
    return base, bf


def _preferred(job: QueuedJob, policy: str, ncpus: int) -> tuple[int, float]:
    """CPUs and estimated run time a job is reserved with: the best shape the policy would start it
    with on this machine (the estimate scales with ranks; folding is not charged)."""
    if policy == "asp-max":
        cap = math.floor(0.6 * ncpus + 1e-9)
        n = next((p for p in job.procs if p <= cap), job.procs[-1])
        if n > ncpus:  # larger than the machine: folded just enough to fit, as fcfs (start_rules.AspMax)
            fold = math.ceil(n / ncpus)
            return (math.ceil(n / fold) if fold <= cfg("fcfs").max_mpl_limit else n), job.estimate * job.procs[0] / n
        return n, job.estimate * job.procs[0] / n
    if policy == "moldable":
        offers = percentage_offers(job.procs, (1.0, 0.8, 0.7, 0.6, 0.5, 0.4))
        n = next((n for n in offers if n <= ncpus), None)
        if n is None:  # no offer fits the machine: the one that folds least, folded just enough to fit
            n = min(offers, key=lambda o: math.ceil(o / ncpus))
            fold = math.ceil(n / ncpus)
            return (math.ceil(n / fold) if fold <= cfg("fcfs").max_mpl_limit else n), job.estimate * job.procs[0] / n
        return n, job.estimate * job.procs[0] / n
    # fcfs: as requested; a job larger than the machine folded just enough to fit (within the MPL cap),
    # on ceil(n / MPL) CPUs, in the time of its request.
    n = job.procs[0]
    fold = math.ceil(n / ncpus)
    return (math.ceil(n / fold) if fold <= cfg("fcfs").max_mpl_limit else n), job.estimate


@st.composite
def snapshots(draw) -> Snapshot:
    ncpus = draw(st.integers(2, 12))
    now = 100.0
    running, used = [], 0
    for jid in range(100, 100 + draw(st.integers(0, 4))):
        nranks = draw(st.integers(1, ncpus))
        mpl = draw(st.sampled_from([1, 1, 2, 4]))
        need = minimum_partition(nranks, mpl)
        if used + need > ncpus:
            continue
        used += need
        start = draw(st.floats(0.0, now))
        end = now + draw(st.integers(1, 200))  # strictly in the future: no overruns here
        running.append(RunningJob(jid, nranks, mpl, need, start, end - start, "short", submit_time=start))
    queue = []
    for jid in range(1, 1 + draw(st.integers(1, 6))):
        procs = tuple(sorted(draw(st.sets(st.integers(1, ncpus + 2), min_size=1, max_size=3)), reverse=True))
        queue.append(
            QueuedJob(
                jid,
                float(draw(st.integers(0, 100))),
                "u",
                procs,
                None,
                draw(st.sampled_from(["long", "short"])),
                float(draw(st.integers(1, 300))),
                float(draw(st.integers(100, 1000))),
            )
        )
    return Snapshot(now, ncpus, tuple(queue), tuple(running))


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(snapshots(), st.sampled_from(["fcfs", "moldable", "asp-max"]), st.sampled_from(["fifo", "sjf", "ljf", "edf"]))
def test_easy_never_delays_the_head_reservation(s, policy, order):
    decisions = decide(s, cfg(f"{policy}+easy:none/{order}"))
    started = {d.job_id for d in decisions if isinstance(d, Start)}
    waiting = [j for j in ordered_queue(s.queue, order) if j.job_id not in started]
    if not waiting:
        return
    head = waiting[0]
    base, bf = _occupations(s, decisions)
    need, dur = _preferred(head, policy, s.ncpus)
    before = _earliest(base, s.ncpus, s.now, need, dur)
    after = _earliest(base + bf, s.ncpus, s.now, need, dur)
    if before is not None:
        assert after is not None and after <= before, (before, after, decisions)


@PROPS
@given(snapshots(), st.sampled_from(["fcfs", "moldable", "asp-max"]), st.sampled_from(["fifo", "sjf", "edf"]))
def test_conservative_keeps_every_reservation(s, policy, order):
    decisions = decide(s, cfg(f"{policy}+conservative:none/{order}"))
    backfilled = {d.job_id for d in decisions if isinstance(d, Start) and d.backfilled}
    started = {d.job_id for d in decisions if isinstance(d, Start)} - backfilled
    base, bf = _occupations(s, decisions)
    # The plan before backfilling: every job not started by the start rule, in priority order, at its
    # earliest slot. The backfilled jobs leave their slots for their actual runs from now; every other
    # job must still be able to start at its planned time.
    plan: dict[int, tuple] = {}
    for job in ordered_queue(s.queue, order):
        if job.job_id in started:
            continue
        need, dur = _preferred(job, policy, s.ncpus)
        t = _earliest(base + list(plan.values()), s.ncpus, s.now, need, dur)
        if t is not None:
            plan[job.job_id] = (t, t + dur, need)
    kept = [slot for jid, slot in plan.items() if jid not in backfilled]
    assert _feasible(base + kept + bf, s.ncpus), (plan, bf, decisions)


@PROPS
@given(
    snapshots(),
    st.sampled_from(["fcfs", "moldable", "asp-max", "psa", "folding", "fjt"]),
    st.sampled_from(["", "+easy:abort", "+easy:malleable", "+conservative:suspend"]),
    st.sampled_from(["fifo", "sjf", "ljf", "edf"]),
)
def test_decisions_never_overcommit_and_are_deterministic(s, policy, backfill, order):
    c = parse_policy_spec(f"{policy}{backfill}/{order}")
    decisions = decide(s, c)
    assert decide(s, c) == decisions
    shuffled = Snapshot(s.now, s.ncpus, s.queue, tuple(reversed(s.running)))
    assert decide(shuffled, c) == decisions
    # Apply them and ask the CPU manager's admission check.
    shapes = {r.job_id: JobShape(r.job_id, r.nranks, r.max_mpl) for r in s.running if not r.suspended}
    queued = {j.job_id: j for j in s.queue}
    for d in decisions:
        assert d.reason
        if isinstance(d, Start):
            job = queued.pop(d.job_id)  # each queued job starts at most once
            assert d.nranks in job.procs and 1 <= d.max_mpl <= 4
            shapes[d.job_id] = JobShape(d.job_id, d.nranks, d.max_mpl)
        elif isinstance(d, SetMaxMpl):
            assert d.max_mpl > shapes[d.job_id].max_mpl
            shapes[d.job_id] = JobShape(d.job_id, shapes[d.job_id].nranks, d.max_mpl)
        else:
            shapes.pop(d.job_id)
    check_admission(list(shapes.values()), s.ncpus)
