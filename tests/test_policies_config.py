"""Policy configuration (validation, spec strings), queue orders, determinism, snapshot validation."""

from __future__ import annotations

import pytest

from tests.test_policies import q, r, run, snap
from vmsched.launcher.policy import (
    POLICIES,
    PolicyConfig,
    QueuedJob,
    Start,
    can_ever_start,
    decide,
    parse_policy_spec,
)
from vmsched.launcher.policy.orders import ordered_queue

# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": "sjf"}, "unknown policy 'sjf'; choose one of: fcfs, moldable, asp-max, psa, folding, fjt"),
        ({"order": "random"}, "unknown order 'random'"),
        ({"backfill": "aggressive"}, "unknown backfill 'aggressive'"),
        ({"expiry": "kill"}, "unknown expiry 'kill'"),
        ({"window_rule": "soon"}, "unknown window_rule 'soon'"),
        ({"moldable_percentages": ()}, "non-empty tuple"),
        ({"moldable_percentages": [1.0, 0.5]}, "non-empty tuple"),
        ({"moldable_percentages": (0.8, 0.5)}, "must start at 1.0"),
        ({"moldable_percentages": (1.0, 0.5, 0.6)}, "strictly decrease"),
        ({"moldable_percentages": (1.0, 0.0)}, "in (0, 1]"),
        ({"moldable_percentages": (1.0, 1.5)}, "in (0, 1]"),
        ({"asp_max": 0}, "asp_max must be a fraction in (0, 1]"),
        ({"asp_max": 1.2}, "asp_max must be a fraction in (0, 1]"),
        ({"asp_max": "0.6"}, "asp_max must be a fraction"),
        ({"fjt_long_mpl": 0}, "fjt_long_mpl must be an integer >= 1"),
        ({"malleable_mpl": 2.5}, "malleable_mpl must be an integer >= 1"),
        ({"max_mpl_limit": True}, "max_mpl_limit must be an integer >= 1"),
    ],
)
def test_invalid_config_is_refused_with_a_clear_message(options, message):
    with pytest.raises(ValueError) as err:
        PolicyConfig(**options)
    assert message in str(err.value)


def test_defaults_are_valid_and_validate_is_callable():
    c = PolicyConfig()
    c.validate()
    assert c.spec() == "fjt+easy:malleable/fifo"
    assert c.effective_window_rule == "either"
    assert PolicyConfig(expiry="abort").effective_window_rule == "time"


# --- spec strings ----------------------------------------------------------------------------------


def test_parse_policy_spec():
    c = parse_policy_spec("fjt+easy:malleable")
    assert (c.policy, c.backfill, c.expiry, c.order) == ("fjt", "easy", "malleable", "fifo")
    c = parse_policy_spec("FCFS+Conservative:abort/sjf", asp_max=0.5)
    assert (c.policy, c.backfill, c.expiry, c.order, c.asp_max) == ("fcfs", "conservative", "abort", "sjf", 0.5)
    c = parse_policy_spec("asp-max/edf")
    assert (c.policy, c.backfill, c.order) == ("asp-max", "none", "edf")
    assert parse_policy_spec("psa+easy").expiry == PolicyConfig().expiry


@pytest.mark.parametrize("policy", POLICIES)
def test_spec_round_trips(policy):
    for spec in (f"{policy}/ljf", f"{policy}+conservative:suspend/edf"):
        assert parse_policy_spec(spec).spec() == spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "bad policy spec"),
        ("fjt+", "bad policy spec"),
        ("fjt easy", "bad policy spec"),
        ("lottery", "unknown policy 'lottery'"),
        ("fjt+greedy", "unknown backfill 'greedy'"),
        ("fjt+easy:explode", "unknown expiry 'explode'"),
        ("fjt/backwards", "unknown order 'backwards'"),
    ],
)
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_policy_spec(spec)


def test_unknown_keyword_option_is_refused():
    with pytest.raises(ValueError, match="unknown policy option.*: colour"):
        parse_policy_spec("fcfs", colour="red")


# --- snapshot validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"procs": ()}, "positive rank counts"),
        ({"procs": (0,)}, "positive rank counts"),
        ({"procs": (2, 4)}, "distinct and descending"),
        ({"procs": (4, 4)}, "distinct and descending"),
        ({"max_mpl": 0}, "max_mpl must be >= 1"),
        ({"job_class": "medium"}, "job_class must be"),
        ({"estimate": -1.0}, "estimate must be >= 0"),
    ],
)
def test_bad_queued_job_is_refused(kwargs, message):
    fields = {"job_id": 1, "submit_time": 0.0, "user": "u", "procs": (4,), "max_mpl": None}
    fields |= {"job_class": "short", "estimate": 1.0} | kwargs
    with pytest.raises(ValueError, match=message):
        QueuedJob(**fields)


# --- orders ----------------------------------------------------------------------------------------


def _jobs():
    return [
        q(1, 1, est=50.0, submit=0.0, deadline=300.0),
        q(2, 1, est=10.0, submit=1.0),
        q(3, 1, est=90.0, submit=2.0, deadline=100.0),
        q(4, 1, est=10.0, submit=3.0, deadline=300.0),
    ]


@pytest.mark.parametrize(
    ("order", "expected"),
    [("fifo", [1, 2, 3, 4]), ("sjf", [2, 4, 1, 3]), ("ljf", [3, 1, 2, 4]), ("edf", [3, 1, 4, 2])],
)
def test_orders(order, expected):
    assert [j.job_id for j in ordered_queue(_jobs(), order)] == expected


def test_fifo_puts_a_requeued_job_back_at_its_submission_place():
    queue = [q(2, 1, submit=5.0), q(3, 1, submit=6.0), q(1, 1, submit=1.0)]  # job 1 was aborted and requeued
    assert [j.job_id for j in ordered_queue(queue, "fifo")] == [1, 2, 3]


def test_equal_keys_keep_arrival_order():
    queue = [q(7, 1, est=5.0, submit=0.0), q(3, 1, est=5.0, submit=0.0)]
    assert [j.job_id for j in ordered_queue(queue, "sjf")] == [7, 3]


@pytest.mark.parametrize(("order", "first"), [("fifo", 1), ("sjf", 2), ("ljf", 3), ("edf", 3)])
def test_the_order_decides_who_is_head(order, first):
    s = snap(1, _jobs())
    assert run(f"fcfs/{order}", s) == [("start", first, 1, 1)]


# --- determinism -----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_same_snapshot_same_decisions(policy):
    s = snap(
        8,
        [q(1, (8, 4, 2), "long"), q(2, (4, 2), "short", est=20.0), q(3, 2, "short", est=5.0)],
        [r(9, 4, cls="short", est=50.0), r(8, 4, max_mpl=2, cpus=2, cls="long", start=3.0)],
        now=10.0,
    )
    cfg = parse_policy_spec(f"{policy}+easy:malleable")
    first = decide(s, cfg)
    assert all(decide(s, cfg) == first for _ in range(3))


@pytest.mark.parametrize(
    ("spec", "procs", "cls", "expected"),
    [
        ("fcfs", (40, 4), "short", False),  # rigid: its largest count must fit, folded at most 4x
        ("fcfs", (16, 4), "short", True),  # 16 ranks folded twice on 8 CPUs
        ("fcfs", (8, 4), "short", True),
        ("moldable", (16, 8), "short", True),  # 50 % of 16 fits on 8 CPUs
        ("moldable", (24, 2), "short", True),  # 2 is below 40 % of 24: 24 folded 3x (issue 13)
        ("asp-max", (9, 8), "short", True),
        ("psa", (16, 8), "short", True),
        ("fjt", (32,), "long", True),  # folded with max MPL 4: 8 CPUs
        ("fjt", (32,), "short", True),  # no count fits unfolded: folded 4x, just enough (issue 13)
        ("fjt", (40,), "short", False),  # would need max MPL 5, above the limit of 4
        ("fjt[max_mpl_limit=2]", (32,), "long", False),
        ("folding", (9,), "short", True),  # folded 2x onto 5 CPUs
        ("psa", (33,), "short", False),
    ],
)
def test_can_ever_start(spec, procs, cls, expected):
    assert can_ever_start(q(1, procs, cls), 8, parse_policy_spec(spec)) is expected


def test_spec_with_numeric_options_round_trips():
    from vmsched.launcher.policy.config import parse_policy_spec

    cfg = parse_policy_spec("fjt[fjt_long_mpl=1,malleable_mpl=2]+easy:malleable/sjf")
    assert (cfg.fjt_long_mpl, cfg.malleable_mpl, cfg.order) == (1, 2, "sjf")
    assert parse_policy_spec(cfg.spec()) == cfg
    assert parse_policy_spec("fjt+easy:abort").spec() == "fjt+easy:abort/fifo"  # defaults stay unwritten
    for bad, needle in (("fjt[bogus=1]", "unknown policy option"), ("fjt[fjt_long_mpl=x]", "needs a number"),
                        ("fjt[fjt_long_mpl=0]", "must be an integer >= 1")):  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            parse_policy_spec(bad)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cls", ["short", "long"])
@pytest.mark.parametrize("backfill", ["", "+easy:malleable", "+conservative:abort"])
def test_every_policy_folds_a_job_bigger_than_the_node_just_enough(policy, cls, backfill):
    from vmsched.launcher.policy.snapshot import QueuedJob, Snapshot

    cfg = parse_policy_spec(policy + backfill)
    for procs, user_cap, shape in (((4,), None, (4, 2)), ((4,), 4, (4, 2)), ((8, 4), None, (4, 2)), ((3,), 2, (3, 2))):
        job = QueuedJob(1, 0.0, "u", procs, user_cap, cls, 60.0)
        starts = [d for d in decide(Snapshot(0.0, 2, (job,), ()), cfg) if isinstance(d, Start)]
        assert len(starts) == 1, (procs, starts)
        got = (starts[0].nranks, starts[0].max_mpl)
        if policy == "fjt" and cls == "long":
            # FJT starts a long job shrunk at its own max MPL (4, or the user's cap) anyway.
            assert got == (shape[0], min(4, user_cap or 4)), got
        elif policy == "fcfs":  # rigid: its request, folded as far as that needs
            assert got == (procs[0], -(-procs[0] // 2)), got
        else:
            assert got == shape, (procs, got)
            assert "folded to fit this node's 2 CPUs" in starts[0].reason
        assert can_ever_start(job, 2, cfg)
    # The user forbids the folding it would need: refused up front, never started.
    capped = QueuedJob(1, 0.0, "u", (4,), 1, cls, 60.0)
    assert not can_ever_start(capped, 2, cfg)


def test_fcfs_folds_a_rigid_job_larger_than_the_machine_just_enough():
    from vmsched.launcher.policy.core import decide
    from vmsched.launcher.policy.snapshot import QueuedJob, Snapshot

    job = QueuedJob(1, 0.0, "u", (4,), None, "short", 10.0)
    [start] = decide(Snapshot(0.0, 2, (job,), ()), parse_policy_spec("fcfs"))
    assert (start.nranks, start.max_mpl) == (4, 2)
    capped = QueuedJob(1, 0.0, "u", (4,), 1, "short", 10.0)  # the user forbids folding: never fits
    assert decide(Snapshot(0.0, 2, (capped,), ()), parse_policy_spec("fcfs")) == []
    small = QueuedJob(1, 0.0, "u", (2,), None, "short", 10.0)  # fits: runs unfolded
    assert decide(Snapshot(0.0, 2, (small,), ()), parse_policy_spec("fcfs"))[0].max_mpl == 1
