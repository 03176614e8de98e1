"""Backfilling, one routine parameterized by reservation depth (STYLE.md 1).

EASY (aggressive, [Lifk94]) reserves for the first job of the queue only; conservative ([WeFe01])
reserves for every queued job, in priority order. A job may then start ahead of its turn only if it fits
now and, over its estimated run time, takes no CPUs that a reservation needs. A conservative job that
holds a reservation gives it up to be tested, and gets it back when it cannot start now. Reservations
are as if recomputed from scratch on every call (plan_cache reuses the last call's only where that gives
the same), so when a job ends early the queue is compressed in priority order.
"""

from __future__ import annotations

import math

from . import plan_cache
from .config import PolicyConfig
from .decisions import Reason
from .profile import FreeProfile, ShadowProfile
from .sizes import Shape, estimate_at
from .snapshot import QueuedJob, RunningJob
from .start_rules import StartRule, fold_note
from .workspace import Workspace

DEPTHS = {"none": 0, "easy": 1, "conservative": math.inf}


def reservations(
    ws: Workspace, rule: StartRule, depth: float
) -> tuple[FreeProfile, dict[int, tuple[float, float, int]]]:
    """Reserve, in priority order, for the first `depth` queued jobs: {job_id: (start, end, cpus)}.

    A job that could never fit (bigger than the machine) holds no reservation.
    """
    profile = ws.profile()
    plan: dict[int, tuple[float, float, int]] = {}
    ordered = ws.ordered()
    for job in ordered if depth >= len(ordered) else ordered[: int(depth)]:
        shape = rule.preferred(job, ws)
        duration, cpus = estimate_at(job, shape.nranks), shape.cpus
        start = profile.earliest_start(cpus, duration)
        if start is not None:
            profile.reserve(start, start + duration, cpus)
            plan[job.job_id] = (start, start + duration, cpus)
    return profile, plan


def shadow_reservation(
    ws: Workspace, rule: StartRule, free: int, head: QueuedJob
) -> tuple[ShadowProfile, dict[int, tuple[float, float, int]]]:
    """reservations(ws, rule, 1) as a ShadowProfile, for a machine with nothing suspended (`free`:
    ws.free_now(), `head`: the first queued job)."""
    profile = ShadowProfile(ws.now, free, *ws.releases())
    shape, duration, cpus = _head_shape(ws, rule, head)
    start = profile.reserve_head(cpus, duration)
    return profile, ({} if start is None else {head.job_id: (start, start + duration, cpus)})


_last_head: tuple[StartRule, QueuedJob, int, PolicyConfig, tuple[Shape, float, int]] | None = None


def _head_shape(ws: Workspace, rule: StartRule, head: QueuedJob) -> tuple[Shape, float, int]:
    """The head's preferred shape, its estimate at that size and its CPUs; the last head's again for the
    same job, rule, machine size and config when the rule's preferred shape depends on nothing else
    (StartRule.preferred_depends_on_state): a head that waits is asked at every pass."""
    global _last_head
    last = _last_head  # read once: another thread may replace it meanwhile
    if last is not None and last[1] is head and last[0] is rule and last[2] == ws.ncpus and last[3] is ws.cfg:
        return last[4]
    shape = rule.preferred(head, ws)
    out = shape, estimate_at(head, shape.nranks), shape.cpus
    if not rule.preferred_depends_on_state:
        _last_head = (rule, head, ws.ncpus, ws.cfg, out)
    return out


def backfill(ws: Workspace, rule: StartRule, head: QueuedJob) -> None:
    """Start (or resume) jobs behind `head` that delay no reservation; `head` itself was refused."""
    any_suspended = ws.any_suspended()
    # This runs over the whole queue at every pass, so jobs are first checked against cheap bounds: no
    # shape of a job needs fewer CPUs than its smallest count folded as far as any policy may fold it
    # (`floor`), nor runs shorter than its estimate at full size. With no job in reach of the free
    # CPUs and none suspended, nothing can start or continue now, and no plan is needed.
    free, limit = ws.free_now(), ws.cfg.max_mpl_limit
    if free <= 0 and not any_suspended:
        return  # every shape needs a CPU
    room = free * limit
    depth = DEPTHS[ws.cfg.backfill]
    profile: FreeProfile | ShadowProfile
    if depth == 1 and not any_suspended:
        # EASY with nothing suspended, the common case at archive scale: the head's reservation from two
        # numbers, then one pass over the queue with all the bounds below at once (spans(free) as two
        # numbers: sizes below `lasting` stay free for ever, the others for `window`).
        profile, plan = shadow_reservation(ws, rule, free, head)
        lasting, window = profile.lasting(free), profile.shadow - ws.now
        candidates = [j for j in ws.ordered()
                      if j.floor_cpus <= free and (j.floor_cpus < lasting or j.estimate <= window)
                      and j.min_procs <= room]  # fmt: skip
        if candidates and candidates[0] is head:  # ordered()[0], decide_in_workspace's (no slice: a copy)
            del candidates[0]
        order = None
    else:
        general = _general(ws, rule, head, depth, ws.suspended(), free, room)
        if general is None:
            return
        profile, plan, candidates, order = general
        free = ws.free_now()  # after the resumptions
    for job in candidates:
        if free <= 0:
            break  # every shape needs a CPU: nothing else can start now
        floor = -(-job.min_procs // limit)
        if job.floor_cpus > floor:
            floor = job.floor_cpus
        if floor > free or job is head:  # (the EASY path's candidates leave the head out already)
            continue
        own = plan.get(job.job_id)
        if own is not None:
            profile.release(*own)
        if profile.fits_from_now(floor, job.estimate):
            for shape in rule.backfill_shapes(job, ws):
                duration, cpus = estimate_at(job, shape.nranks), shape.cpus
                # `cpus <= free` is ws.fits(job.job_id, shape): `free` is kept at ws.free_now().
                if profile.fits_from_now(cpus, duration) and cpus <= free:
                    until = ws.now + duration
                    profile.reserve(ws.now, until, cpus)
                    # The reason is formatted when read (decisions.Reason). EASY's plan is made for this call
                    # and never changed, so it is read then; a conservative plan may be carried over to the
                    # next call and changed there: its part is made now.
                    held = plan if depth == 1 else _describe_plan(plan, head, depth, job.job_id)
                    why = Reason(
                        _backfill_text, ws.cfg.backfill, rule.name, job, shape, until, ws.ncpus, held, head, depth
                    )
                    ws.start(job, shape, why, True, True, duration)  # backfilled, with a window
                    free, own = ws.free_now(), None
                    break
        if own is not None:
            profile.reserve(*own)
    if order is not None:
        plan_cache.remember(ws, profile, order)


def _backfill_text(backfill: str, rule: str, job: QueuedJob, shape: Shape, until: float, ncpus: int,
                   held: str | dict[int, tuple[float, float, int]], head: QueuedJob, depth: float) -> str:  # fmt: skip
    if not isinstance(held, str):
        held = _describe_plan(held, head, depth, job.job_id)
    return f"{backfill} backfill ({rule}): {shape.nranks} ranks until t={until:g} {held}" + fold_note(job, shape, ncpus)


def _general(
    ws: Workspace, rule: StartRule, head: QueuedJob, depth: float, suspended: list[RunningJob], free: int, room: int
) -> tuple[FreeProfile, dict[int, tuple[float, float, int]], list[QueuedJob], tuple[list, list] | None] | None:
    """backfill's profile, plan, candidates and (conservative) the plan's order, for every case but EASY
    with nothing suspended; suspended jobs that fit are resumed here. None when nothing can start or
    continue."""
    in_reach = [j for j in ws.ordered() if j.floor_cpus <= free and j.min_procs <= room and j is not head]
    if not in_reach and not suspended:
        return None
    order = None
    if depth == math.inf:
        profile, plan, order = plan_cache.plan(ws, rule)
    else:
        profile, plan = reservations(ws, rule, depth)

    # Suspended jobs first: they already ran and hold memory. Their progress is unknown, so they are
    # expected to need their whole estimate again.
    for r in suspended:
        if r.job_id in ws.touched:
            continue
        shape, duration = Shape(r.nranks, r.max_mpl), r.estimate
        if profile.min_free(ws.now, ws.now + duration) >= shape.cpus and ws.free_now() >= shape.cpus:
            profile.reserve(ws.now, ws.now + duration, shape.cpus)
            until, held = ws.now + duration, _describe_plan(plan, head, depth, r.job_id)
            ws.resume(r.job_id, until, f"{ws.cfg.backfill} backfill: resume until t={until:g} {held}")

    # Another bound, from the profile: at least `floor` CPUs must stay free from now for the job's
    # shortest run; a job holding a reservation [s, e) gets its own CPUs back only from s on.
    span = profile.spans(max(free, 0))  # `free` from before the resumptions: in_reach's bound
    if len(plan) == (head.job_id in plan):  # only the head (not in reach) holds a reservation
        return profile, plan, [j for j in in_reach if j.estimate <= span[j.floor_cpus]], order
    candidates = []
    for j in in_reach:
        own = plan.get(j.job_id)
        if (j.estimate if own is None else min(j.estimate, own[0] - ws.now)) <= span[j.floor_cpus]:
            candidates.append(j)
    return profile, plan, candidates, order


def _describe_plan(plan: dict[int, tuple[float, float, int]], head: QueuedJob, depth: float, job_id: int) -> str:
    if depth == 1:
        if head.job_id in plan:
            return f"without delaying job {head.job_id}'s reservation at t={plan[head.job_id][0]:g}"
        return f"(job {head.job_id} can never fit and holds no reservation)"
    others = sorted(jid for jid in plan if jid != job_id)
    shown = ", ".join(map(str, others[:5])) + (", ..." if len(others) > 5 else "")
    return f"without delaying the reservations of jobs [{shown}]" if others else "(no reservations to protect)"
