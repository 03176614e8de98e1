"""SA request selection (sa-start): the allowed size with the smallest predicted response time, where the
prediction is the earliest slot in the profile of running jobs plus the estimate at that size."""

from __future__ import annotations

from tests.test_policies import q, r, run, snap


def test_a_short_job_takes_the_smaller_size_that_starts_now() -> None:
    # 4 of 8 CPUs busy until t=100. At 8 ranks the job (estimate 50 at 8) would respond at 100 + 50;
    # at 4 ranks it starts now and runs 100: responds at 100. SA picks 4, now.
    s = snap(8, [q(1, (8, 4), est=50.0, submit=0.0)], [r(9, 4, est=100.0)])
    assert run("sa-start", s) == [("start", 1, 4, 1)]


def test_a_long_job_waits_for_the_size_that_responds_sooner() -> None:
    # Estimate 200 at 8 ranks: waiting for all 8 responds at 300, 4 ranks now at 400. SA waits.
    s = snap(8, [q(1, (8, 4), est=200.0, submit=0.0)], [r(9, 4, est=100.0)])
    assert run("sa-start", s) == []


def test_the_reservation_is_for_the_chosen_size_and_backfilling_respects_it() -> None:
    # The head waits for 8 CPUs at t=100; a 4-rank job of 150 s would delay it, one of 100 s does not.
    head, long_, short = (
        q(1, (8, 4), est=200.0, submit=0.0),
        q(2, 4, est=150.0, submit=1.0),
        q(3, 4, est=100.0, submit=2.0),
    )
    s = snap(8, [head, long_, short], [r(9, 4, est=100.0)])
    assert run("sa-start+easy:none", s) == [("start", 3, 4, 1, ("bf", 100.0))]


def test_sa_submit_molds_a_new_job_once_and_it_then_waits_for_that_size() -> None:
    from vmsched.launcher.policy import Mold, parse_policy_spec
    from vmsched.launcher.policy.core import decide

    # Estimate 200 at 8 ranks: 8 ranks respond at 300, 4 ranks now at 400: molded to 8, and it waits.
    s = snap(8, [q(1, (8, 4), est=200.0, submit=0.0)], [r(9, 4, est=100.0)])
    decisions = decide(s, parse_policy_spec("sa-submit"))
    assert [(type(d), d.job_id, d.nranks) for d in decisions] == [(Mold, 1, 8)]
    # A molded job is rigid: the next pass leaves its size alone even when 4 ranks would now respond sooner.
    later = snap(8, [q(1, 8, est=200.0, submit=0.0)], [r(9, 4, est=1000.0)])
    assert run("sa-submit", later) == []
    assert run("sa-start", snap(8, [q(1, (8, 4), est=200.0, submit=0.0)], [r(9, 4, est=1000.0)])) == [
        ("start", 1, 4, 1)
    ]


def test_a_job_molded_to_fewer_ranks_is_expected_to_take_longer_at_that_size() -> None:
    """The estimate is for the one count a rigid job has: molded from 8 to 4 ranks, an estimate of 50 at
    8 becomes 100 at 4 (as SA predicted it), in the decision and in the next pass's reservations."""
    from vmsched.launcher.policy import Mold, parse_policy_spec
    from vmsched.launcher.policy.core import decide
    from vmsched.sim.engine import simulate

    s = snap(8, [q(1, (8, 4), est=50.0, submit=0.0)], [r(9, 4, est=100.0)])
    decisions = decide(s, parse_policy_spec("sa-submit"))
    assert [(type(d), d.nranks, d.estimate) for d in decisions][:1] == [(Mold, 4, 100.0)]
    # The simulator applies it: job 1 molds to 4 ranks at t=1 and starts beside job 2 (4 ranks until
    # 100), running 100 s at 4 ranks; job 3 (8 ranks) then waits for it until 101, not until 100.
    jobs = [q(2, 4, est=100.0, submit=0.0), q(1, (8, 4), est=50.0, submit=1.0), q(3, 8, est=10.0, submit=2.0)]
    runs = {rec.job_id: (rec.start, rec.end) for rec in simulate(jobs, 8, parse_policy_spec("sa-submit"))}
    assert runs == {2: (0.0, 100.0), 1: (1.0, 101.0), 3: (101.0, 111.0)}
