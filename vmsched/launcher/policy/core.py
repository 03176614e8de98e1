"""The decision core: decide(snapshot, cfg) -> decisions, and when to call it again without an event.

Main loop (thesis fig. 3.6 / fig. 3.19): start the head of the ordered queue with the start rule, and
again with the next head, while that works. When the head cannot start and backfilling is on, first act
on expired windows of backfilled jobs and try the head again; when none are expired, backfill behind it.
Pure and deterministic: the same snapshot and config always give the same decisions, and nothing here
knows whether the launcher daemon or the simulator applies them.
"""

from __future__ import annotations

from .backfill import backfill
from .config import PolicyConfig
from .decisions import Decision, Start
from .expiry import act_on_expired, actionable, expired_jobs
from .sizes import Shape
from .snapshot import QueuedJob, Snapshot
from .start_rules import RULES, StartRule
from .workspace import Workspace, running_set


def decide(snapshot: Snapshot, cfg: PolicyConfig) -> list[Decision]:
    """Decisions to apply, in order, for this snapshot."""
    rule = RULES[cfg.policy]
    if no_room(snapshot, cfg, rule):
        return []
    return decide_in_workspace(snapshot, cfg, rule)


def no_room(snapshot: Snapshot, cfg: PolicyConfig, rule: StartRule) -> bool:
    """Whether no decision is possible because every CPU is held: every start and resumption needs a
    free CPU, and nothing would free one (a rule that shrinks running jobs to make room, an expiry
    action) or mold a queued job. A shortcut, not a rule: decide_in_workspace would return nothing too
    (tests/test_vmsim_parity.py checks it); a simulated queue hits it at a third of its events."""
    return running_set(snapshot.running).used >= snapshot.ncpus and waits_for_cpus(cfg, rule)


def waits_for_cpus(cfg: PolicyConfig, rule: StartRule | None = None) -> bool:
    """Whether every decision the policy can make needs free CPUs: its start rule does not shrink
    running jobs to make room nor mold queued jobs, and no expiry action acts on running jobs."""
    rule = rule or RULES[cfg.policy]
    return not (rule.makes_room or rule.molds_queued or (cfg.backfill != "none" and cfg.expiry != "none"))


def nothing_fits(free_cpus: int, least_floor: float, suspended: bool, cfg: PolicyConfig) -> bool:
    """Whether decide() decides nothing for any snapshot in which `free_cpus` CPUs are left beyond the
    running jobs' minimum partitions, every queued job needs more (`least_floor`: the least
    QueuedJob.floor_cpus in the queue, inf when it is empty) and no job is suspended.

    Exact, not a heuristic: every start passes Workspace.fits (its shape's minimum partition must be
    free), no shape of a job needs fewer CPUs than its floor_cpus (a job folds at most to its user's
    cap), resuming needs a suspended job, and a policy that waits for CPUs makes no other decision.
    no_room is the case free_cpus <= 0. For a driver that knows these figures without building a
    snapshot (the simulator, at the many instants when nothing fits).
    """
    return least_floor > free_cpus and not suspended and waits_for_cpus(cfg)


def decide_in_workspace(snapshot: Snapshot, cfg: PolicyConfig, rule: StartRule) -> list[Decision]:
    """decide() without the shortcut."""
    ws = Workspace.from_snapshot(snapshot, cfg)
    if rule.molds_queued:  # mold_new does nothing for the other rules
        rule.mold_new(ws)
    while True:
        ordered = ws.ordered()
        if not ordered:
            _resume_while_room(ws)
            break
        head = ordered[0]
        if rule.try_start(head, ws):
            continue
        if cfg.backfill == "none":
            break
        expired = expired_jobs(ws, head) if cfg.expiry != "none" else None  # none expire without an action
        if expired:
            act_on_expired(ws, expired, head)
            continue  # their CPUs may be enough for the head now
        backfill(ws, rule, head)
        break
    return ws.decisions


def _resume_while_room(ws: Workspace) -> None:
    """With nobody waiting, suspended jobs continue as soon as they fit (oldest start first)."""
    for r in ws.suspended():
        if r.job_id not in ws.touched and ws.free_now() >= Shape(r.nranks, r.max_mpl).cpus:
            ws.resume(r.job_id, ws.now + r.estimate, "queue empty: room to continue")


def next_event_time(snapshot: Snapshot, cfg: PolicyConfig) -> float | None:
    """Earliest future time at which decide() may decide something new without an arrival or a finish:
    the next backfill window to expire (when an expiry action is set). None if there is none."""
    if cfg.backfill == "none" or cfg.expiry == "none" or cfg.effective_window_rule == "order":
        return None
    times = [
        r.window_end
        for r in snapshot.running
        if r.window_end is not None and r.window_end > snapshot.now and actionable(cfg, r)
    ]
    return min(times, default=None)


def can_ever_start(job: QueuedJob, ncpus: int, cfg: PolicyConfig) -> bool:
    """Whether the policy would ever start the job on this machine: it does when the job waits alone
    for an idle machine (more free CPUs or a shorter queue never make a start rule refuse). For
    refusing impossible submissions up front instead of letting them block the queue."""
    return any(isinstance(d, Start) for d in decide(Snapshot(job.submit_time, ncpus, (job,), ()), cfg))


def hold_idle_cpus(snapshot: Snapshot, cfg: PolicyConfig) -> bool:
    """Whether idle CPUs must stay idle for waiting jobs (the CPU manager then expands nobody).

    The thesis's CPU manager never expands while jobs wait. We keep that for the non-work-conserving
    PSA, and otherwise only while a queued job could start now: when none can, idle CPUs are better
    used by the running jobs, which shrink back to their minimum the moment a job is admitted.
    """
    if not snapshot.queue:
        return False
    if cfg.policy == "psa":
        return True
    return any(isinstance(d, Start) for d in decide(snapshot, cfg))
