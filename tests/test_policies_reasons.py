"""Pending reasons from the decision core (issue 13): pure, from the snapshot and decide()'s decisions."""

from __future__ import annotations

from dataclasses import replace

from tests.test_policies import q, r, snap
from vmsched.launcher.policy import decide, parse_policy_spec
from vmsched.launcher.policy.reasons import after_decisions, pending_reasons


def reasons(spec: str, s, requeued=()) -> dict[int, str]:
    cfg = parse_policy_spec(spec)
    return pending_reasons(s, cfg, decide(s, cfg), requeued)


def test_resources_reservation_priority_with_easy():
    # 4 CPUs, 2 busy until t=100. Head needs 4; job 3 fits but would run past t=100; job 4 needs 3.
    s = snap(4, [q(2, 4), q(3, 2, est=500.0), q(4, 3, est=10.0)], [r(9, 2, est=100.0)])
    assert reasons("fcfs+easy:none", s) == {2: "Resources", 3: "Reservation", 4: "Priority"}
    # A short job 5 is backfilled into one of the free CPUs: it has no reason, and job 3 no longer fits.
    s = replace(s, queue=(*s.queue, q(5, 1, est=50.0)))
    assert reasons("fcfs+easy:none", s) == {2: "Resources", 3: "Priority", 4: "Priority"}


def test_without_backfilling_everyone_behind_the_head_waits_for_priority():
    s = snap(4, [q(2, 4), q(3, 1, est=1.0)], [r(9, 2, est=100.0)])
    assert reasons("fcfs", s) == {2: "Resources", 3: "Priority"}


def test_conservative_reservations_hold_back_a_job_that_fits_now():
    s = snap(4, [q(2, 4), q(3, 2, est=500.0)], [r(9, 2, est=100.0)])
    assert reasons("fcfs+conservative:none", s) == {2: "Resources", 3: "Reservation"}


def test_suspended_and_requeued():
    # Resuming job 9 (200 s) would delay the head's reservation at t=100: it stays suspended.
    stopped = replace(r(9, 2, backfilled=True, est=200.0), suspended=True)
    s = snap(4, [q(2, 4), q(3, 4)], [stopped, r(8, 2, est=100.0)])
    assert reasons("fcfs+easy:suspend", s, requeued=[3]) == {9: "Suspended", 2: "Resources",
                                                             3: "Requeued (window expired)"}  # fmt: skip


def test_started_jobs_have_no_reason_and_the_rest_see_the_machine_as_decide_left_it():
    s = snap(4, [q(2, 2), q(3, 4), q(4, 2, est=500.0)], [])
    cfg = parse_policy_spec("fcfs+easy:none")
    decisions = decide(s, cfg)
    assert [d.job_id for d in decisions] == [2]
    after = after_decisions(s, decisions)
    assert [j.job_id for j in after.queue] == [3, 4] and {x.job_id for x in after.running} == {2}
    assert pending_reasons(s, cfg, decisions) == {3: "Resources", 4: "Reservation"}
