"""Why a job waits: pending reasons from the decision core (pure; shown by `vmq`).

`decide` starts every job it can; what is left waits for one of these reasons, worked out with the same
start rule and backfill shapes that `decide` used, on the machine as its decisions leave it:

- `Resources`: the head of the queue (in the policy's order) waits for CPUs; a non-work-conserving rule
  (PSA, FJT) may also hold it while CPUs are idle, waiting for its share;
- `Reservation`: a job behind the head that would fit in the free CPUs now, but starting it would delay
  a reservation (of the head under EASY, of any job ahead under conservative backfilling);
- `Priority`: behind the head and not startable now (too big for the free CPUs, not eligible for
  backfilling, or no backfilling);
- `Requeued (window expired)`: a job whose backfill window expired and that was aborted and requeued;
- `Suspended`: a running job stopped because its backfill window expired, until there is room;
- `Paused`: the queue is held by root (no decision is made at all).

Dependencies and begin times are decided before the policy sees the queue (vmsched.launcher.dependencies).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from .config import PolicyConfig
from .decisions import Abort, Decision, Mold, Resume, SetMaxMpl, Start, Suspend
from .snapshot import RunningJob, Snapshot
from .start_rules import RULES
from .workspace import Workspace

RESOURCES, RESERVATION, PRIORITY = "Resources", "Reservation", "Priority"
SUSPENDED, REQUEUED = "Suspended", "Requeued (window expired)"
PAUSED = "Paused"  # the whole queue is held (root's `pause`); the driver says so without asking the policy


def after_decisions(snapshot: Snapshot, decisions: Sequence[Decision]) -> Snapshot:
    """The snapshot as the decisions leave it (for drivers that do not rebuild one from their state)."""
    queue = {j.job_id: j for j in snapshot.queue}
    running = {r.job_id: r for r in snapshot.running}
    for d in decisions:
        if isinstance(d, Start):
            j = queue.pop(d.job_id)
            running[d.job_id] = RunningJob(d.job_id, d.nranks, d.max_mpl, -(-d.nranks // d.max_mpl), snapshot.now,
                                           d.estimate, j.job_class, d.backfilled, d.window_end, False,
                                           j.submit_time, j.max_mpl)  # fmt: skip
        elif isinstance(d, SetMaxMpl):
            running[d.job_id] = replace(running[d.job_id], max_mpl=d.max_mpl)
        elif isinstance(d, Abort):
            running.pop(d.job_id)
        elif isinstance(d, Suspend):
            running[d.job_id] = replace(running[d.job_id], suspended=True)
        elif isinstance(d, Resume):
            running[d.job_id] = replace(running[d.job_id], suspended=False, window_end=d.window_end)
        elif isinstance(d, Mold):
            queue[d.job_id] = replace(queue[d.job_id], procs=(d.nranks,))
    return Snapshot(snapshot.now, snapshot.ncpus, tuple(queue.values()), tuple(running.values()))


def pending_reasons(snapshot: Snapshot, cfg: PolicyConfig, decisions: Sequence[Decision] = (),
                    requeued: Iterable[int] = ()) -> dict[int, str]:  # fmt: skip
    """{job id: reason} for every queued job and every suspended running job, once `decisions` (those
    decide() returned for this snapshot) are applied. `requeued`: queued jobs that were aborted and
    requeued after their window expired."""
    after = after_decisions(snapshot, decisions) if decisions else snapshot
    ws = Workspace.from_snapshot(after, cfg)
    rule = RULES[cfg.policy]
    reasons = {r.job_id: SUSPENDED for r in after.running if r.suspended}
    again = set(requeued)
    free, limit = ws.free_now(), cfg.max_mpl_limit
    for i, job in enumerate(ws.ordered()):
        # No shape needs fewer CPUs than its smallest count folded as far as allowed (backfill's bound):
        # most jobs are ruled out without asking the start rule.
        in_reach = max(job.floor_cpus, -(-job.min_procs // limit)) <= free
        if job.job_id in again:
            why = REQUEUED
        elif i == 0:
            why = RESOURCES
        elif in_reach and cfg.backfill != "none" and any(ws.fits(job.job_id, s) for s in rule.backfill_shapes(job, ws)):
            why = RESERVATION
        else:
            why = PRIORITY
        reasons[job.job_id] = why
    return reasons
