"""Start rules of the launcher's policies on hand-made snapshots, including the thesis's examples
(fig. 5.2 and fig. 6.2 situations). Helpers here are shared by the other test_policies_* files."""

from __future__ import annotations

from vmsched.cpumanager.partition import JobShape, partition_sizes
from vmsched.launcher.policy import (
    Abort,
    PolicyConfig,
    QueuedJob,
    Resume,
    RunningJob,
    SetMaxMpl,
    Snapshot,
    Start,
    Suspend,
    decide,
    parse_policy_spec,
)
from vmsched.launcher.policy.sizes import percentage_offers

# --- helpers ---------------------------------------------------------------------------------------


def q(job_id, procs, cls="short", est=100.0, submit=None, max_mpl=None, deadline=None) -> QueuedJob:
    procs = (procs,) if isinstance(procs, int) else tuple(procs)
    return QueuedJob(job_id, float(job_id if submit is None else submit), "u", procs, max_mpl, cls, est, deadline)


def r(
    job_id,
    nranks,
    cpus=None,
    max_mpl=1,
    start=0.0,
    est=100.0,
    cls="short",
    backfilled=False,
    window_end=None,
    suspended=False,
    submit=None,
    cap=None,
) -> RunningJob:
    return RunningJob(
        job_id=job_id,
        nranks=nranks,
        max_mpl=max_mpl,
        cpus=nranks if cpus is None else cpus,
        start_time=start,
        estimate=est,
        job_class=cls,
        backfilled=backfilled,
        window_end=window_end,
        suspended=suspended,
        submit_time=float(job_id if submit is None else submit),
        max_mpl_cap=cap,
    )


def snap(ncpus, queue=(), running=(), now=0.0) -> Snapshot:
    return Snapshot(now, ncpus, tuple(queue), tuple(running))


def summary(decisions) -> list[tuple]:
    """Decisions without reasons and estimates, for compact assertions."""
    out = []
    for d in decisions:
        assert d.reason, f"decision without a reason: {d}"
        if isinstance(d, Start):
            out.append(("start", d.job_id, d.nranks, d.max_mpl) + (("bf", d.window_end),) * d.backfilled)
        elif isinstance(d, SetMaxMpl):
            out.append(("mpl", d.job_id, d.max_mpl))
        elif isinstance(d, Abort):
            out.append(("abort", d.job_id))
        elif isinstance(d, Suspend):
            out.append(("suspend", d.job_id))
        elif isinstance(d, Resume):
            out.append(("resume", d.job_id))
    return out


def cfg(spec: str = "fcfs", **kw) -> PolicyConfig:
    return parse_policy_spec(spec, **kw)


def run(spec, snapshot, **kw) -> list[tuple]:
    return summary(decide(snapshot, cfg(spec, **kw)))


RANGE8 = tuple(range(8, 0, -1))

# --- FCFS (rigid) ----------------------------------------------------------------------------------


def test_fcfs_starts_in_order_with_the_request_and_mpl_1():
    s = snap(8, [q(1, 4), q(2, 3), q(3, 2)])
    assert run("fcfs", s) == [("start", 1, 4, 1), ("start", 2, 3, 1)]


def test_fcfs_never_skips_the_head_even_if_a_later_job_fits():
    s = snap(8, [q(1, 8), q(2, 1)], [r(9, 4)])
    assert run("fcfs", s) == []


def test_fcfs_treats_a_moldable_job_as_rigid_with_its_largest_count():
    s = snap(8, [q(1, (8, 4, 2))], [r(9, 2)])
    assert run("fcfs", s) == []
    assert run("fcfs", snap(8, [q(1, (8, 4, 2))])) == [("start", 1, 8, 1)]


def test_running_jobs_count_with_their_minimum_partition():
    # A job folded to max MPL 4 can be shrunk to 2 CPUs, so 6 are available although it holds 8.
    s = snap(8, [q(1, 6)], [r(9, 8, cpus=8, max_mpl=4)])
    assert run("fcfs", s) == [("start", 1, 6, 1)]


def test_suspended_jobs_hold_no_cpus():
    s = snap(8, [q(1, 8)], [r(9, 8, suspended=True, backfilled=True)])
    assert run("fcfs", s) == [("start", 1, 8, 1)]


# --- percentage offers (moldable-deadline-backfilling paper) ---------------------------------------


def test_percentage_offers_round_down_to_allowed_counts():
    assert percentage_offers(tuple(range(10, 0, -1)), (1.0, 0.8, 0.7, 0.6, 0.5, 0.4)) == [10, 8, 7, 6, 5, 4]
    assert percentage_offers((8, 4, 2), (1.0, 0.8, 0.7, 0.6, 0.5, 0.4)) == [8, 4]
    assert percentage_offers((32,), (1.0, 0.8, 0.4)) == [32]  # rigid: only the request
    assert percentage_offers((16, 12), (1.0, 0.5)) == [16]  # 8 is not allowed: no offer


def test_moldable_start_offers_80_70_60_50_40_percent():
    procs = tuple(range(10, 0, -1))
    assert run("moldable", snap(10, [q(1, procs)], [r(9, 3)])) == [("start", 1, 7, 1)]  # 70 %
    assert run("moldable", snap(10, [q(1, procs)], [r(9, 6)])) == [("start", 1, 4, 1)]  # 40 %
    assert run("moldable", snap(10, [q(1, procs)], [r(9, 7)])) == []  # below 40 %: wait


def test_moldable_percentages_are_configurable():
    procs = tuple(range(10, 0, -1))
    s = snap(10, [q(1, procs)], [r(9, 3)])
    assert run("moldable", s, moldable_percentages=(1.0, 0.5)) == [("start", 1, 5, 1)]
    assert run("moldable", s, moldable_percentages=(1.0,)) == []


def test_moldable_offers_do_not_change_a_rigid_job():
    assert run("moldable", snap(10, [q(1, 10)], [r(9, 1)])) == []


# --- ASP-MAX ---------------------------------------------------------------------------------------


def test_asp_max_caps_at_60_percent_and_is_work_conserving():
    procs = tuple(range(10, 0, -1))
    s = snap(10, [q(1, procs), q(2, procs), q(3, procs)])
    # 6 = 60 % of 10; the next job takes the 4 left; nothing is left for the third.
    assert run("asp-max", s) == [("start", 1, 6, 1), ("start", 2, 4, 1)]


def test_asp_max_gives_what_is_free_rounded_to_an_allowed_count():
    s = snap(10, [q(1, (8, 4, 2))], [r(9, 5)])
    assert run("asp-max", s) == [("start", 1, 4, 1)]


def test_asp_max_fraction_is_configurable_and_a_job_above_max_gets_its_smallest_count():
    procs = tuple(range(10, 0, -1))
    assert run("asp-max", snap(10, [q(1, procs)]), asp_max=0.5) == [("start", 1, 5, 1)]
    assert run("asp-max", snap(10, [q(1, (9, 8))])) == [("start", 1, 8, 1)]


# --- PSA -------------------------------------------------------------------------------------------


def test_psa_equipartitions_the_machine_over_the_queued_jobs():
    s = snap(8, [q(1, RANGE8), q(2, RANGE8), q(3, RANGE8), q(4, RANGE8)])
    # shares: 8//4 = 2, 8//3 = 2, 8//2 = 4 (4 free), then 8//1 = 8 with nothing free.
    assert run("psa", s) == [("start", 1, 2, 1), ("start", 2, 2, 1), ("start", 3, 4, 1)]


def test_psa_is_non_work_conserving_where_asp_max_is_not():
    s = snap(8, [q(1, (4, 2))], [r(9, 6)])
    assert run("psa", s) == []  # its share is 4 and only 2 are free: keep them idle
    assert run("asp-max", s) == [("start", 1, 2, 1)]


# --- Folding ---------------------------------------------------------------------------------------


def test_folding_halves_the_running_job_for_the_head():
    s = snap(8, [q(1, 4)], [r(9, 8, start=0.0)])
    assert run("folding", s) == [("mpl", 9, 2), ("start", 1, 4, 1)]


def test_folding_picks_the_latest_started_job():
    s = snap(8, [q(1, 2)], [r(8, 4, start=10.0), r(9, 4, start=0.0)])
    assert run("folding", s) == [("mpl", 8, 2), ("start", 1, 2, 1)]


def test_folding_doubles_again_up_to_the_limit_then_waits_without_folding():
    assert run("folding", snap(8, [q(1, 6)], [r(9, 8)])) == [("mpl", 9, 4), ("start", 1, 6, 1)]
    # 7 CPUs cannot be freed even at max MPL 4: nothing is folded in vain.
    assert run("folding", snap(8, [q(1, 7)], [r(9, 8)])) == []
    assert run("folding", snap(8, [q(1, 7)], [r(9, 8)]), max_mpl_limit=8) == [("mpl", 9, 8), ("start", 1, 7, 1)]


def test_folding_respects_the_users_cap():
    assert run("folding", snap(8, [q(1, 4)], [r(9, 8, cap=1)])) == []


def test_folding_uses_moldability_before_folding():
    s = snap(8, [q(1, RANGE8)], [r(9, 4)])
    assert run("folding", s) == [("start", 1, 4, 1)]  # 50 % of the request fits: nobody folds


def test_folding_a_job_started_in_the_same_call_starts_it_folded():
    s = snap(8, [q(1, 8), q(2, 4)])
    assert run("folding", s) == [("start", 1, 8, 2), ("start", 2, 4, 1)]


# --- FJT (thesis §5.3, fig. 5.5) -------------------------------------------------------------------


def test_fjt_starts_a_long_job_folded_when_only_short_jobs_run():
    # The acceptance scenario on 2 CPUs.
    s = snap(2, [q(1, 2, "long")], [r(9, 1, cls="short")])
    assert run("fjt", s) == [("start", 1, 2, 4)]


def test_fjt_short_job_makes_a_folded_long_job_shrink_without_a_new_mpl():
    s = snap(2, [q(1, 1, "short")], [r(9, 2, cpus=2, max_mpl=4, cls="long")])
    assert run("fjt", s) == [("start", 1, 1, 1)]


def test_fjt_short_job_shrinks_an_expanded_long_job_by_raising_its_mpl():
    s = snap(8, [q(1, 4, "short")], [r(9, 8, cpus=8, max_mpl=1, cls="long")])
    assert run("fjt", s) == [("mpl", 9, 4), ("start", 1, 4, 1)]


def test_fjt_shrinks_only_as_many_long_jobs_as_needed_latest_first():
    running = [r(8, 4, max_mpl=1, cls="long", start=0.0), r(9, 4, max_mpl=1, cls="long", start=5.0)]
    assert run("fjt", snap(8, [q(1, 2, "short")], running)) == [("mpl", 9, 4), ("start", 1, 2, 1)]


def test_fjt_short_job_waits_without_idle_cpus_or_shrinkable_long_jobs():
    assert run("fjt", snap(8, [q(1, 2, "short")], [r(9, 8, cls="short")])) == []


def test_fjt_long_job_waits_when_short_cpus_are_promised_to_a_shrunk_long_job():
    running = [r(8, 8, cpus=4, max_mpl=4, cls="long"), r(9, 2, cls="short")]
    assert run("fjt", snap(8, [q(1, (8, 4), "long")], running)) == []


def test_fjt_long_jobs_queued_start_expanded_and_the_last_one_shrunk():
    s = snap(8, [q(1, (8, 4, 2), "long"), q(2, (8, 4, 2), "long")])
    # Two long jobs: equipartition 8//2 = 4, expanded (max MPL 1). Then the last long job's share is
    # the whole machine, and it starts shrunk in what is left.
    assert run("fjt", s) == [("start", 1, 4, 1), ("start", 2, 8, 4)]


def test_fjt_long_job_with_other_long_queued_waits_on_a_full_machine():
    s = snap(8, [q(1, 4, "long"), q(2, 4, "long")], [r(9, 8, cls="short")])
    assert run("fjt", s) == []


def test_fjt_short_job_share_is_over_the_long_jobs_queued():
    s = snap(8, [q(1, RANGE8, "short"), q(2, RANGE8, "long"), q(3, RANGE8, "long")])
    assert run("fjt", s)[0] == ("start", 1, 4, 1)  # 8 // 2 long jobs


def test_fjt_long_mpl_is_capped_by_the_user_and_configurable():
    s = snap(2, [q(1, 2, "long", max_mpl=2)], [r(9, 1)])
    assert run("fjt", s) == [("start", 1, 2, 2)]
    assert run("fjt", snap(2, [q(1, (2, 1), "long")], [r(9, 1)]), fjt_long_mpl=1) == [("start", 1, 1, 1)]


# --- thesis fig. 5.2: a long job J1 runs on the whole machine when a short job J2 arrives ----------


def _fig52(j2) -> Snapshot:
    return snap(8, [j2], [r(1, 8, cpus=8, max_mpl=4, cls="long", start=0.0)], now=10.0)


def test_fig_5_2_alternative_3_fjt_short_job_unfolded_in_a_large_partition():
    decisions = run("fjt", _fig52(q(2, RANGE8, "short", submit=5.0)))
    # J1 is shrunk to its minimum (2 CPUs); J2 runs unfolded and gets more than N/2.
    assert decisions == [("start", 2, 6, 1)]
    sizes = partition_sizes([JobShape(1, 8, 4, 8), JobShape(2, 6, 1)], 8, queue_empty=True)
    assert sizes == {1: 2, 2: 6}
    # When J2 ends, J1 expands again to the whole machine.
    assert partition_sizes([JobShape(1, 8, 4, 2)], 8, queue_empty=True) == {1: 8}


def test_fig_5_2_alternative_2_short_job_sized_to_its_partition():
    assert run("fjt", _fig52(q(2, (8, 4), "short", submit=5.0))) == [("start", 2, 4, 1)]


def test_fig_5_2_alternative_1_virtual_malleability_for_both_jobs():
    # J2 treated as a long job too: it starts folded and both run shrunk.
    assert run("fjt", _fig52(q(2, 8, "long", submit=5.0))) == [("start", 2, 8, 4)]
    sizes = partition_sizes([JobShape(1, 8, 4, 8), JobShape(2, 8, 4)], 8, queue_empty=True)
    assert all(size < 8 for size in sizes.values())


# --- thesis fig. 6.2: job1, job3, job4 short, job2 long; all arrive at t=0; N = 8 -------------------
# job1 cannot get more than N/2 processes, job2 cannot get N/2 or fewer.


def _fig62(rigid: bool) -> list[QueuedJob]:
    return [
        q(1, 4, "short", est=100.0, submit=0.0),
        q(2, 8 if rigid else (8, 6, 5), "long", est=300.0, submit=0.0),
        q(3, 6 if rigid else (6, 5, 4, 3, 2), "short", est=50.0, submit=0.0),
        q(4, 2, "short", est=30.0, submit=0.0),
    ]


def test_fig_6_2_a_fcfs_rigid_leaves_fragmentation():
    assert run("fcfs", snap(8, _fig62(rigid=True))) == [("start", 1, 4, 1)]


def test_fig_6_2_b_rigid_easy_backfills_job4_and_aborts_it_when_its_window_expires():
    assert run("fcfs+easy:abort", snap(8, _fig62(rigid=True))) == [
        ("start", 1, 4, 1),
        ("start", 4, 2, 1, ("bf", 30.0)),  # job3 (6 ranks) does not fit in the gap
    ]
    jobs = _fig62(rigid=True)
    later = snap(8, [jobs[1], jobs[2]], [r(1, 4, est=100.0), r(4, 2, est=30.0, backfilled=True, window_end=30.0)], 40.0)
    assert run("fcfs+easy:abort", later) == [("abort", 4)]


def test_fig_6_2_c_moldable_easy_backfills_job3_into_the_gap_and_aborts_it():
    assert run("moldable+easy:abort", snap(8, _fig62(rigid=False))) == [
        ("start", 1, 4, 1),
        ("start", 3, 4, 1, ("bf", 75.0)),  # molded to the 4 free CPUs; 50 s at 6 ranks -> 75 s at 4
    ]
    jobs = _fig62(rigid=False)
    later = snap(8, [jobs[1], jobs[3]], [r(1, 4), r(3, 4, est=75.0, backfilled=True, window_end=75.0)], 80.0)
    assert run("moldable+easy:abort", later) == [("abort", 3)]


def test_fig_6_2_d_fjt_adapts_every_job_to_the_free_cpus():
    assert run("fjt", snap(8, _fig62(rigid=False))) == [
        ("start", 1, 4, 1),
        ("start", 2, 8, 4),  # long job starts shrunk next to the short one
        ("start", 3, 2, 1),  # short job unfolded in the 2 CPUs left
    ]


def test_fig_6_2_e_fjt1_easy_malleable_shrinks_the_expired_job_and_starts_job2():
    spec = "fjt+easy:malleable"
    assert run(spec, snap(8, _fig62(rigid=False)), fjt_long_mpl=1) == [
        ("start", 1, 4, 1),
        ("start", 3, 4, 1, ("bf", 75.0)),
    ]
    jobs = _fig62(rigid=False)
    # t=110: job1 has ended; job3 overran its window (75) and still holds 4 CPUs.
    later = snap(8, [jobs[1], jobs[3]], [r(3, 4, est=75.0, backfilled=True, window_end=75.0, submit=0.0)], 110.0)
    decisions = run(spec, later, fjt_long_mpl=1)
    # Instead of aborting job3 it is shrunk to max MPL 4 (1 CPU); job2 starts at once in a partition
    # smaller than in the other alternatives.
    assert decisions == [("mpl", 3, 4), ("start", 2, 6, 1)]
