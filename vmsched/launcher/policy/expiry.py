"""Expired backfill windows and what to do about them (thesis ch. 6 §6.4.3, fig. 3.6).

A backfilled job's window is expired when
- "time": its window_end (start + its estimate) has passed and it is still running ([Lifk94]); or
- "order": every job running now arrived after the job at the head of the queue (thesis §6.4.3: "all
  the jobs that are currently in execution are out of order"), the thesis's more relaxed condition for
  estimates that are only a class.
Windows are only looked at when the head job cannot start. Actions: abort (kill and requeue), suspend
(SIGSTOP; resumed by backfilling when it delays no reservation, or when the queue is empty), none, and
malleable: SetMaxMpl(job, 4), which lets the CPU manager shrink the job to a quarter instead of killing
it; the job expands again when CPUs come free.
"""

from __future__ import annotations

from vmsched.cpumanager.partition import minimum_partition

from .config import PolicyConfig
from .sizes import mpl_cap
from .snapshot import QueuedJob, RunningJob
from .workspace import Workspace


def malleable_mpl(cfg: PolicyConfig, job: RunningJob) -> int:
    return min(cfg.malleable_mpl, mpl_cap(cfg, job.max_mpl_cap))


def actionable(cfg: PolicyConfig, job: RunningJob) -> bool:
    """Whether the expiry action would still change anything for this running job."""
    if not job.backfilled or job.suspended or cfg.expiry == "none":
        return False
    if cfg.expiry == "malleable":
        # Already shrunk (or a job that cannot get smaller): nothing left to do.
        target = malleable_mpl(cfg, job)
        return minimum_partition(job.nranks, target) < minimum_partition(job.nranks, job.max_mpl)
    return True


def _arrived_after(job: RunningJob, head: QueuedJob) -> bool:
    return (job.submit_time, job.job_id) > (head.submit_time, head.job_id)


def expired_jobs(ws: Workspace, head: QueuedJob) -> list[RunningJob]:
    """Backfilled running jobs whose window has expired and that the action can still act on."""
    if ws.cfg.expiry == "none":
        return []
    rule = ws.cfg.effective_window_rule
    active = ws.active()
    candidates = [r for r in active if r.job_id not in ws.touched and actionable(ws.cfg, r)]
    if not candidates:
        return []
    out_of_order = all(_arrived_after(r, head) for r in active)
    result = []
    for r in candidates:
        timed_out = r.window_end is not None and r.window_end <= ws.now
        if (rule in ("time", "either") and timed_out) or (rule in ("order", "either") and out_of_order):
            result.append(r)
    return result


def act_on_expired(ws: Workspace, jobs: list[RunningJob], head: QueuedJob) -> None:
    for r in jobs:
        why = (
            f"backfill window expired (t={r.window_end:g})"
            if r.window_end is not None and r.window_end <= ws.now
            else (f"backfill window expired: every running job arrived after head job {head.job_id}")
        )
        if ws.cfg.expiry == "abort":
            ws.abort(r.job_id, f"{why}; abort and requeue")
        elif ws.cfg.expiry == "suspend":
            ws.suspend(r.job_id, f"{why}; suspend until there is room")
        elif ws.cfg.expiry == "malleable":
            mpl = malleable_mpl(ws.cfg, r)
            ws.touched.add(r.job_id)
            ws.set_max_mpl(r.job_id, mpl, f"{why}; shrink to max MPL {mpl} instead of killing it (thesis §6.4.3)")
