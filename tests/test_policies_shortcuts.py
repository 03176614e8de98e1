"""Shortcuts of the decision core and of the simulator against the general paths they skip: each is
exact, and these tests fail when one is not (see docs/vmsim.md, "Textbook correctness and speed")."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_policies import cfg, q, r, snap
from vmsched.launcher.policy import Snapshot, Start, decide
from vmsched.launcher.policy.decisions import Reason
from vmsched.launcher.policy.snapshot import QueuedJob
from vmsched.launcher.policy.start_rules import RULES
from vmsched.launcher.policy.workspace import RunningSet, Workspace
from vmsched.sim.engine import Simulation, folding_runtime

# Rules that start the head with StartRule.try_start (no shrinking of running jobs to make room).
PLAIN_RULES = ["fcfs", "moldable", "asp-max", "psa", "sa-start", "sa-submit"]

procs_lists = st.lists(st.integers(1, 24), min_size=1, max_size=3, unique=True).map(lambda p: sorted(p, reverse=True))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(PLAIN_RULES),
    st.integers(1, 16),  # CPUs
    st.lists(st.tuples(procs_lists, st.sampled_from([None, 1, 2, 4]), st.sampled_from([1, 2, 4, 8])), min_size=1,
             max_size=4),  # queued jobs: procs, user's MPL cap, policy's MPL limit (the same for all)
    st.lists(st.integers(1, 6), max_size=4),  # running jobs' sizes
)  # fmt: skip
def test_no_shape_needs_fewer_cpus_than_the_floor_and_try_start_bound_changes_nothing(policy, ncpus, jobs, running):
    """core.nothing_fits and StartRule.try_start's early return rest on one fact: no shape a start rule
    offers needs fewer CPUs than the job's floor_cpus. Checked for every shape, and try_start with the
    bound against the shapes loop it skips."""
    limit = jobs[0][2]
    config = cfg(policy, max_mpl_limit=limit)
    rule = RULES[policy]
    queue = [q(i + 1, tuple(p), max_mpl=cap) for i, (p, cap, _) in enumerate(jobs)]
    held, run = 0, []
    for i, n in enumerate(running):
        if held + n <= ncpus:
            run.append(r(100 + i, n, est=50.0 * (i + 1)))
            held += n
    s = snap(ncpus, queue, run)
    for job in queue:
        ws = Workspace.from_snapshot(s, config)
        shapes = rule.shapes(job, ws) + rule.backfill_shapes(job, ws) + [rule.preferred(job, ws)]
        assert all(shape.cpus >= job.floor_cpus for shape in shapes), (job, shapes)
        general = Workspace.from_snapshot(s, config)
        for shape in rule.shapes(job, general):  # StartRule.try_start without the bound
            if general.fits(job.job_id, shape):
                general.start(job, shape, "")
                break
        fast = Workspace.from_snapshot(s, config)
        assert rule.try_start(job, fast) == bool(general.decisions)
        assert [(d.job_id, d.nranks, d.max_mpl) for d in fast.decisions] == [
            (d.job_id, d.nranks, d.max_mpl) for d in general.decisions
        ]


def test_a_start_reads_the_same_reason_formatted_late_as_early():
    """Start's reason is formatted when first read (decisions.Reason); compared, hashed and shown by
    its text, as a plain string field was."""
    late = Start(1, 4, 1, True, 10.0, Reason(lambda a, b: f"{a} until t={b:g}", "easy", 10.0), 10.0)
    early = Start(1, 4, 1, True, 10.0, "easy until t=10", 10.0)
    assert late.reason == "easy until t=10" and late == early and hash(late) == hash(early)
    assert repr(late) == repr(early) and "reason='easy until t=10'" in repr(late)
    assert late != Start(1, 4, 1, True, 10.0, "other", 10.0)
    # The texts decide() gives: a backfilled start names the head's reservation it protects.
    s = snap(10, [q(1, 10), q(2, 2, est=50.0)], [r(9, 8, est=100.0)])
    [start] = decide(s, cfg("fcfs+easy:none"))
    assert start.reason == "easy backfill (fcfs): 2 ranks until t=50 without delaying job 1's reservation at t=100"
    [head] = decide(snap(10, [q(1, 4)]), cfg("fcfs+easy:none"))
    assert head.reason == "fcfs: start 4 ranks (10 CPUs free)"


def _workload(seed: int, n: int = 80) -> list[QueuedJob]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for jid in range(1, n + 1):
        t += rng.randint(1, 30)
        procs = rng.choice([(8,), (4,), (2,), (1,), (8, 4, 2), (6,)])
        jobs.append(QueuedJob(jid, t, "u", procs, rng.choice([None, 1, 1, 2]), rng.choice(["long", "short"]),
                              float(rng.randint(5, 200))))  # fmt: skip
    return jobs


class _Checked(Simulation):
    """The least queued floor it keeps is the least of its counts at every instant, and the running set
    it derives from the last one (running_set_changed) is the one worked out from scratch."""

    derived = 0

    def nothing_fits(self) -> bool:
        assert self._least_floor in (None, min(self.floors, default=math.inf))
        return super().nothing_fits()

    def snapshot(self) -> Snapshot:
        # Ask the last set for its releases, as a pass does, so that the next one derives them.
        before = self._running_set
        if before is not None and before._by_end is None:
            before.releases()
        snap = super().snapshot()
        got, fresh = self._running_set, RunningSet(snap.running)
        assert got.jobs is snap.running and got.used == fresh.used and got.any_suspended == fresh.any_suspended
        if got is not before and got._by_end is not None:
            type(self).derived += 1
        ends, cpus = got.releases()
        assert ends == fresh.releases()[0], f"t={self.now:g}"
        assert sorted(zip(ends, cpus, strict=True)) == sorted(zip(*fresh.releases(), strict=True)), f"t={self.now:g}"
        return snap


class _General(_Checked):
    quick_fixed_starts = False


def test_the_simulators_shortcuts_give_the_general_paths_records():
    """Fixed-size jobs started in one step (Simulation.quick_fixed_starts) and the least floor kept
    across instants give the records of the general path: start, end, partition history, CPU time."""
    for spec in ("fcfs+easy:none", "fjt+easy:malleable", "folding+conservative:suspend", "moldable+easy:abort"):
        for seed in (1, 2, 3):
            model = lambda j, n, c: 1.3 * folding_runtime(j, n, c)  # noqa: E731
            fast = _Checked(_workload(seed), 8, cfg(spec), model).run()
            general = _General(_workload(seed), 8, cfg(spec), model).run()
            assert fast == general, (spec, seed)
    assert _Checked.derived > 1000  # the derived releases were checked, not only built from scratch


def test_the_simulator_says_its_queue_is_in_fifo_order_only_when_it_is():
    """Snapshot.fifo_listed spares decide() the fifo sort: the simulator claims it exactly while no
    requeued job is listed after later submissions, and the same snapshot without the claim (sorted
    by decide()) gives the same decisions at every instant."""
    for spec in ("fcfs+easy:abort", "fcfs+easy:none", "fjt+easy:malleable", "moldable+conservative:abort"):
        claimed = unclaimed = 0

        def check(snap: Snapshot, decisions: list, spec: str = spec) -> None:
            nonlocal claimed, unclaimed
            in_order = list(snap.queue) == sorted(snap.queue, key=lambda j: j.submit_time)
            assert not snap.fifo_listed or in_order, snap.queue
            claimed += snap.fifo_listed
            unclaimed += not snap.fifo_listed
            plain = Snapshot(snap.now, snap.ncpus, tuple(list(snap.queue)), snap.running)
            assert decide(plain, cfg(spec)) == decisions, f"t={snap.now:g}"

        slow = lambda j, n, c: 1.5 * folding_runtime(j, n, c)  # noqa: E731 - windows expire: jobs are requeued
        for seed in (1, 2):
            Simulation(_workload(seed), 8, cfg(spec), slow, on_decide=check).run()
        assert claimed > 50, (spec, claimed)
        if spec.endswith(":abort"):
            assert unclaimed > 0, (spec, "no requeued job listed out of order: the other case was not seen")


def test_the_order_the_driver_lists_running_jobs_in_changes_no_decision():
    """RunningSet sorts running jobs by start only when a pass asks for them in that order; the profile
    of their releases is built from the driver's order (jobs ending together release together). The
    running jobs listed in reverse and shuffled give the same decisions at every instant."""
    for spec in ("fcfs+easy:none", "fcfs+conservative:none", "folding+easy:suspend", "fjt+easy:malleable", "sa-start"):
        seen = 0

        def check(snap: Snapshot, decisions: list, spec: str = spec) -> None:
            nonlocal seen
            shuffled = list(snap.running)
            random.Random(len(shuffled)).shuffle(shuffled)
            for running in (tuple(reversed(snap.running)), tuple(shuffled)):
                other = Snapshot(snap.now, snap.ncpus, snap.queue, running, snap.fifo_listed)
                assert decide(other, cfg(spec)) == decisions, f"t={snap.now:g}"
            seen += len(snap.running) > 1

        for seed in (1, 2):
            Simulation(_workload(seed), 8, cfg(spec), folding_runtime, on_decide=check).run()
        assert seen > 20, (spec, seen)


def test_the_heads_shape_remembered_from_the_last_pass_changes_no_decision():
    """backfill._head_shape reuses the last head's preferred shape for the same job, rule, machine and
    config when the rule's choice depends on nothing else: with it forgotten before every call, every
    instant decides the same (PSA and FJT size the head by the queue: never reused)."""
    from vmsched.launcher.policy import backfill

    for spec in ("fcfs+easy:none", "moldable+easy:abort", "psa+easy:none", "fjt+easy:malleable", "sa-start+easy:none"):
        reused = 0

        def check(snap: Snapshot, decisions: list, spec: str = spec) -> None:
            nonlocal reused
            reused += backfill._last_head is not None and any(backfill._last_head[1] is j for j in snap.queue)
            backfill._last_head = None
            assert decide(snap, cfg(spec)) == decisions, f"t={snap.now:g}"

        for seed in (1, 2):
            Simulation(_workload(seed), 8, cfg(spec), folding_runtime, on_decide=check).run()
        if spec.startswith(("fcfs", "moldable")):
            assert reused > 20, (spec, reused)
    # A head that PSA sizes by the queue's length is never remembered: the same job heads a longer queue.
    backfill._last_head = None
    head, running = q(1, (8, 4, 2, 1), est=100.0), [r(9, 6, est=100.0)]
    for n in (2, 4, 8):
        queue = [head, *(q(10 + i, 1, est=500.0) for i in range(n - 1))]
        decide(snap(8, queue, running), cfg("psa+easy:none"))
        assert backfill._last_head is None


def test_a_simulation_leaves_no_cycles_for_the_paused_collector():
    """Simulation.run pauses the cyclic garbage collector: that holds no memory only while a run builds
    no reference cycles, which these runs (every kind of decision) check. The collector runs again after."""
    import gc

    slow = lambda j, n, c: 1.4 * folding_runtime(j, n, c)  # noqa: E731 - windows expire: aborts, suspensions
    for spec in ("fcfs+easy:abort", "fjt+easy:malleable", "folding+conservative:suspend", "sa-submit+easy:none"):
        gc.collect()
        gc.disable()
        try:
            Simulation(_workload(4), 8, cfg(spec), slow).run()
            assert gc.collect() == 0, spec
        finally:
            gc.enable()
    Simulation(_workload(4), 8, cfg("fcfs+easy:none")).run()
    assert gc.isenabled()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 60), st.booleans()), max_size=5),  # size, end, stopped
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from([0.0, 5.0, 10.0, 30.0]), st.booleans()), min_size=1,
             max_size=4),  # started in the pass: ranks, estimate, with a window
)  # fmt: skip
def test_a_pass_that_only_started_jobs_sees_the_releases_of_the_running_jobs_by_id(running, started):
    """Workspace.releases and any_suspended after starts only, without building the running jobs by id,
    give what they give from them: the same profile and the same head slot."""
    from vmsched.launcher.policy.profile import FreeProfile, ShadowProfile
    from vmsched.launcher.policy.sizes import Shape

    now = 20.0
    jobs = [r(100 + i, n, start=0.0, est=float(end), suspended=s) for i, (n, end, s) in enumerate(running)]
    s = snap(64, [q(i + 1, n, est=e) for i, (n, e, _) in enumerate(started)], jobs, now=now)
    fast, general = Workspace.from_snapshot(s, cfg("fcfs+easy:none")), Workspace.from_snapshot(s, cfg("fcfs+easy:none"))
    general.running  # noqa: B018 - built now: every start below goes through it
    for ws in (fast, general):
        for job, (n, e, window) in zip(s.queue, started, strict=True):
            ws.start(job, Shape(n, 1), "", window, window, e)
    assert fast.any_suspended() == general.any_suspended()
    (ends, cpus), (ends2, cpus2) = fast.releases(), general.releases()
    assert ends == ends2 and sorted(zip(ends, cpus, strict=True)) == sorted(zip(ends2, cpus2, strict=True))
    free = fast.free_now()
    assert free == general.free_now()
    steps = FreeProfile.of_sorted(now, free, ends, cpus).steps()
    assert steps == FreeProfile.of_sorted(now, free, ends2, cpus2).steps()
    for need in range(1, 12):
        assert ShadowProfile(now, free, ends, cpus).reserve_head(need, 10.0) == ShadowProfile(
            now, free, ends2, cpus2
        ).reserve_head(need, 10.0)
