"""One decision core, two drivers: a workload runs through vmsim, and at every scheduling instant the
same state is written into a real launcher store (SQLite), read back by the launcher daemon's own
snapshot code, and given to the daemon's decision path. Both must decide the same, and agree on whether
running jobs may expand into idle CPUs (core.hold_idle_cpus, the one rule both use)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from vmsched.config import load_config
from vmsched.launcher.policy import parse_policy_spec
from vmsched.launcher.policy.core import decide, hold_idle_cpus
from vmsched.launcher.policy.snapshot import QueuedJob, Snapshot
from vmsched.launcher.service import Launcher
from vmsched.launcher.store import Store
from vmsched.sim.engine import folding_runtime, simulate


def _workload(seed: int, n: int = 30) -> list[QueuedJob]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for jid in range(1, n + 1):
        t += rng.randint(1, 40)
        cls = rng.choice(["long", "short"])
        procs = rng.choice([(8,), (8, 4, 2), (4, 2, 1), (2, 1), (6,)])
        est = float(rng.randint(100, 300) if cls == "long" else rng.randint(5, 60))
        jobs.append(QueuedJob(jid, t, "alice", procs, rng.choice([None, None, 1, 2]), cls, est))
    return jobs


def _daemon_snapshot(snap: Snapshot, tmp: Path, cfg_spec: str) -> Snapshot:
    """The snapshot the launcher daemon builds from its store when its jobs are in these states."""
    db = tmp / f"jobs-{snap.now:.6f}.db"
    store = Store(db)
    launcher = Launcher(load_config(state_dir=tmp), store, None, parse_policy_spec(cfg_spec))  # type: ignore[arg-type]
    try:
        launcher.ncpus = snap.ncpus
        common = {"uid": 1000, "gid": 1000, "name": "j", "command": ["true"], "cwd": "/", "env": {},
                  "stdout": "-", "stderr": "-"}  # fmt: skip
        for q in snap.queue:
            store.add_job(id=q.job_id, user=q.user, procs=list(q.procs), max_mpl=q.max_mpl, job_class=q.job_class,
                          estimate=q.estimate, deadline=q.deadline, submit_time=q.submit_time, **common)  # fmt: skip
        for r in snap.running:
            store.add_job(id=r.job_id, user="alice", procs=[r.nranks], max_mpl=r.max_mpl_cap, job_class=r.job_class,
                          estimate=r.estimate, submit_time=r.submit_time, **common)  # fmt: skip
            store.update(r.job_id, state="running", nranks=r.nranks, cur_max_mpl=r.max_mpl, start_time=r.start_time,
                         run_estimate=r.estimate, backfilled=int(r.backfilled), window_end=r.window_end,
                         suspended=int(r.suspended))  # fmt: skip
            launcher.partitions[r.job_id] = {"cpus": list(range(r.cpus))}
        return launcher.snapshot(snap.now)
    finally:
        launcher.close()
        store.close()


@pytest.mark.parametrize(
    "spec",
    ["fjt+easy:malleable", "fcfs+easy:abort", "folding+conservative:suspend", "sa-submit+easy:abort", "sa-start"],
)
def test_the_daemon_and_vmsim_decide_the_same_at_every_instant(tmp_path: Path, spec: str) -> None:
    cfg = parse_policy_spec(spec)
    seen: list[tuple[Snapshot, list]] = []
    # Jobs run 1.4 times their estimate: windows expire and the expiry actions are exercised too.
    slow = lambda j, n, c: 1.4 * folding_runtime(j, n, c)  # noqa: E731
    simulate(_workload(3), 8, cfg, slow, on_decide=lambda s, d: seen.append((s, d)))
    assert len(seen) > 40
    acted = set()
    for i, (snap, decisions) in enumerate(seen[:80]):
        (tmp_path / str(i)).mkdir()
        daemon = _daemon_snapshot(snap, tmp_path / str(i), spec)
        assert sorted(daemon.queue, key=lambda j: j.job_id) == sorted(snap.queue, key=lambda j: j.job_id)
        assert sorted(daemon.running, key=lambda j: j.job_id) == sorted(snap.running, key=lambda j: j.job_id)
        assert decide(daemon, cfg) == decisions, f"instant {i} (t={snap.now:g})"
        assert hold_idle_cpus(daemon, cfg) == hold_idle_cpus(snap, cfg)
        acted.update(type(d).__name__ for d in decisions)
    assert "Start" in acted, acted
    if "+" in spec:  # not only starts: the policy acted on running jobs (or molded queued ones)
        assert len(acted) >= 2, acted


@pytest.mark.parametrize(
    "spec", ["fcfs+conservative:abort", "moldable+conservative:suspend", "folding+conservative:none"]
)
@pytest.mark.parametrize("factor", [1.0, 0.6, 1.4])  # jobs end on time, early (compression), late (expiry)
def test_carrying_the_conservative_plan_over_changes_no_decision(
    spec: str, factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vmsched.launcher.policy import plan_cache

    def decisions(enabled: bool) -> list:
        plan_cache.ENABLED, plan_cache._last = enabled, None
        seen: list = []
        model = lambda j, n, c: factor * folding_runtime(j, n, c)  # noqa: E731
        simulate(_workload(5, n=60), 8, parse_policy_spec(spec), model, on_decide=lambda s, d: seen.append((s.now, d)))
        return seen

    reused = []
    check = plan_cache._reusable
    monkeypatch.setattr(plan_cache, "_reusable", lambda ws, rule: reused.append(check(ws, rule)) or reused[-1])
    try:
        assert decisions(True) == decisions(False)
    finally:
        plan_cache.ENABLED = True
    if factor == 1.0:
        assert sum(p is not None for p in reused) > 10, "the plan was never carried over: nothing was compared"


@pytest.mark.parametrize(
    "spec",
    [
        "fcfs+easy:none",
        "moldable+conservative:none",
        "asp-max",
        "psa+easy:none",
        "sa-start+easy:none",
        "fcfs+easy:abort",
        "fjt+easy:malleable",
        "folding",
        "sa-submit",
    ],  # fmt: skip
)
def test_the_full_machine_shortcut_changes_no_decision(spec: str) -> None:
    """decide() skips the workspace when every CPU is held and nothing could free one (core.no_room):
    at every instant of a simulated workload, the full decision path gives the same. That includes the
    instants at which the simulator does not call decide() at all (core.nothing_fits): on_decide then
    sees no decisions."""
    from vmsched.launcher.policy.core import decide_in_workspace, no_room
    from vmsched.launcher.policy.start_rules import RULES

    cfg = parse_policy_spec(spec)
    rule, shortcuts, instants = RULES[cfg.policy], 0, 0
    for seed in (3, 4, 5):

        def check(snap: Snapshot, decisions: list) -> None:
            nonlocal shortcuts, instants
            instants += 1
            assert decide_in_workspace(snap, cfg, rule) == decisions, f"t={snap.now:g}"
            shortcuts += no_room(snap, cfg, rule)

        simulate(_workload(seed, n=60), 8, cfg, folding_runtime, on_decide=check)
    assert instants > 100
    takes_it = not (rule.makes_room or rule.molds_queued or (cfg.backfill != "none" and cfg.expiry != "none"))
    assert (shortcuts > 0) == takes_it, (shortcuts, instants)


@pytest.mark.parametrize("spec", ["fcfs+easy:none", "fjt+easy:malleable", "folding+conservative:suspend", "sa-start"])
def test_reusing_what_was_worked_out_for_the_same_tuples_changes_no_decision(spec: str) -> None:
    """The simulator hands the same queue or running tuple to several calls, and decide() then reuses
    what it worked out for them (workspace.running_set, orders.ordered_tuple): at every instant, the
    same snapshot made of fresh tuples (nothing to reuse) gives the same decisions."""
    from vmsched.launcher.policy.orders import ordered_tuple
    from vmsched.launcher.policy.workspace import running_set

    cfg = parse_policy_spec(spec)
    last: list[Snapshot] = []
    reused = 0

    def check(snap: Snapshot, decisions: list) -> None:
        nonlocal reused
        if last and (snap.queue is last[-1].queue or snap.running is last[-1].running):
            reused += 1
        last.append(snap)
        fresh = Snapshot(snap.now, snap.ncpus, tuple(list(snap.queue)), tuple(list(snap.running)))
        assert fresh.queue is not snap.queue or not snap.queue
        assert decide(fresh, cfg) == decisions, f"t={snap.now:g}"
        # Leave the simulator's own tuples remembered, as they were before this check.
        running_set(snap.running)
        ordered_tuple(snap.queue, cfg.order)

    for seed in (3, 4):
        simulate(_workload(seed, n=60), 8, cfg, folding_runtime, on_decide=check)
    assert reused > 20, reused
