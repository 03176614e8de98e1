"""Conservative reservations carried from one scheduling pass to the next.

Conservative backfilling plans every queued job at every pass, O(Q x P), and archive logs keep thousands
of jobs queued. Between two passes usually only time passed, jobs arrived and jobs ended when they were
expected to: the plan from scratch is then the last plan, with the new jobs placed after it. The last
pass's plan is reused exactly when that holds (every check below); otherwise it is made from scratch.
So decide() remains a function of its snapshot alone: the cache changes how fast, never what.

What must hold for a queued job's reservation to be reused: the machine from now on looks as it did
(every running job is one the last pass knew, with the same expected end and CPUs, or one it planned to
start, started at that slot; every job it knew that is gone was expected to be gone by now; nothing is
suspended), and the jobs before it in priority order are the same, with the same shapes, and none of
their slots lies in the past.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import PolicyConfig
from .profile import FreeProfile
from .sizes import estimate_at
from .snapshot import QueuedJob
from .start_rules import StartRule
from .workspace import Workspace

Slot = tuple[float, float, int]  # start, end, cpus


@dataclass
class Plan:
    cfg: PolicyConfig
    ncpus: int
    now: float
    running: dict[int, tuple[float, int]]  # every active job at the end of the pass: (expected end, CPUs)
    jobs: list[QueuedJob]  # the planned (queued) jobs in priority order, and their slots
    slots: list[Slot | None]
    profile: FreeProfile


ENABLED = True  # tests turn it off to compare against planning from scratch
_last: Plan | None = None


def _reusable(ws: Workspace, rule: StartRule) -> Plan | None:
    last = _last
    if not ENABLED or last is None or rule.preferred_depends_on_state or ws.suspended():
        return None
    if last.cfg != ws.cfg or last.ncpus != ws.ncpus or ws.now < last.now:
        return None
    active = ws.active()
    slots: dict[int, Slot | None] | None = None
    for r in active:
        if r.expected_end <= ws.now:
            return None  # past its estimate: from scratch it is expected to end the instant after now
        known = last.running.get(r.job_id)
        if known is not None:
            if known != (r.expected_end, r.held):
                return None
        else:  # started since, at its slot?
            if slots is None:
                slots = {j.job_id: slot for j, slot in zip(last.jobs, last.slots, strict=True)}
            if slots.get(r.job_id) != (r.start_time, r.expected_end, r.held):
                return None
    now_active = {r.job_id for r in active}
    if any(end > ws.now and jid not in now_active for jid, (end, _) in last.running.items()):
        return None  # ended early, aborted or suspended: the queue is compressed from scratch
    return last


def plan(ws: Workspace, rule: StartRule) -> tuple[FreeProfile, dict[int, Slot], tuple[list, list]]:
    """Reservations for every queued job in priority order, reusing the last pass's where they hold:
    (profile with them, {job id: slot}, the planned jobs and slots to remember after the pass)."""
    last = _reusable(ws, rule)
    ordered = ws.ordered()
    jobs: list[QueuedJob] = []
    slots: list[Slot | None] = []
    k = 0
    if last is None:
        profile = ws.profile()
    else:
        running = {r.job_id for r in ws.active()}
        keep = [i for i, j in enumerate(last.jobs) if j.job_id not in running]
        old_jobs, old_slots = [last.jobs[i] for i in keep], [last.slots[i] for i in keep]
        # The common prefix of the two priority orders (the same job objects compare in C) ...
        n = min(len(old_jobs), len(ordered))
        k = n if list(ordered[:n]) == old_jobs[:n] else next(i for i in range(n) if ordered[i] != old_jobs[i])
        # ... up to the first slot that lies in the past.
        past = [i for i in range(k) if old_slots[i] is not None and old_slots[i][0] < ws.now]  # type: ignore[index]
        k = past[0] if past else k
        profile = last.profile.truncated(ws.now)
        for slot in old_slots[k:]:
            if slot is not None:
                profile.release(*slot)
        jobs, slots = old_jobs[:k], old_slots[:k]
    for job in ordered[k:]:
        shape = rule.preferred(job, ws)
        duration = estimate_at(job, shape.nranks)
        start = profile.earliest_start(shape.cpus, duration)
        slot = None if start is None else (start, start + duration, shape.cpus)
        if slot is not None:
            profile.reserve(*slot)
        jobs.append(job)
        slots.append(slot)
    planned = {j.job_id: slot for j, slot in zip(jobs, slots, strict=True) if slot is not None}
    return profile, planned, (jobs, slots)


def remember(ws: Workspace, profile: FreeProfile, planned: tuple[list, list]) -> None:
    """Keep this pass's plan, after its backfilled starts (they are running jobs now), for the next."""
    global _last
    if not ENABLED:
        return
    running = {r.job_id: (r.expected_end, r.held) for r in ws.active()}
    jobs, slots = planned
    keep = [i for i, j in enumerate(jobs) if j.job_id not in running]
    _last = Plan(ws.cfg, ws.ncpus, ws.now, running, [jobs[i] for i in keep], [slots[i] for i in keep], profile)
