"""A job's lifecycle: its states, why it ended, and the transitions, each one DB write.

    queued -> starting -> running -> completed | failed | cancelled | timeout | lost
      |          |           |-> aborting -> queued    (window expired under "abort": requeued)
      |          |-> queued | failed                   (a start step failed: see `start`)
      |-> cancelled

The state strings are the wire format (vmq, vmacct --json, the SQLite column), so the enums are `StrEnum`s:
`JobState.RUNNING == "running"`. Why a job ended is its own column, `end_cause`, set when the launcher
decides to stop it (cancel, time limit, policy abort) and kept when it ends; nothing is parsed from the
free-text reason any more (databases of schema 2 get it derived once from that text: `legacy_end_cause`).

A start is all-or-nothing (`start`): admit -> store -> spawn -> set_leader -> mark_running -> go. A failure
at any step undoes the earlier ones (the shim, which has not been given its go, is killed by pid; the CPU
manager's admission is released) and leaves the job queued (the admission itself failed, or the CPU manager
was unreachable: try again later) or failed with end cause start-failed and the step in its reason.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from vmsched.protocol import DaemonUnavailable, ProtocolError

if TYPE_CHECKING:
    from vmsched.launcher.store import JobRecord, Store

log = logging.getLogger("vm-launcher")


class JobState(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    ABORTING = "aborting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    LOST = "lost"


class EndCause(StrEnum):
    COMPLETED = "completed"  # exit status 0
    FAILED = "failed"  # non-zero exit status
    START_FAILED = "start-failed"  # a start step failed; the job never ran
    CANCELLED = "cancelled"  # by its user or root
    ABORTED = "aborted"  # by the policy (window expired under "kill")
    KILLED_AT_LIMIT = "killed-at-limit"  # ran past its time limit (overrun = "kill")
    LOST = "lost"  # its shim vanished without a status


ACTIVE = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.ABORTING)
HOLDING = (JobState.STARTING, JobState.RUNNING, JobState.ABORTING)  # holds (or is about to hold) CPUs
FINISHED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.LOST)

# The state a job ends in, by its end cause (the wire shows states; end_cause says which of them exactly).
END_STATE = {
    EndCause.COMPLETED: JobState.COMPLETED, EndCause.FAILED: JobState.FAILED,
    EndCause.START_FAILED: JobState.FAILED, EndCause.CANCELLED: JobState.CANCELLED,
    EndCause.ABORTED: JobState.CANCELLED, EndCause.KILLED_AT_LIMIT: JobState.TIMEOUT, EndCause.LOST: JobState.LOST,
}  # fmt: skip

# The steps of a start, in order; VMSCHED_LAUNCHER_FAULTS="start=STEP" makes one fail (vmsched/faults.py).
START_STEPS = ("admit", "store", "spawn", "set_leader", "mark_running", "go")


def legacy_end_cause(state: str, reason: str) -> EndCause | None:
    """Schema 2 -> 3: the end cause of a job as the launcher used to tell it, from its state and reason
    text (for an active job: the cause of a stop already under way). Used once, by the migration."""
    if state == JobState.COMPLETED:
        return EndCause.COMPLETED
    if state == JobState.FAILED:
        return EndCause.START_FAILED if reason.startswith("could not start") else EndCause.FAILED
    if state == JobState.TIMEOUT or reason.startswith("time limit"):
        return EndCause.KILLED_AT_LIMIT
    if state == JobState.LOST:
        return EndCause.LOST
    if reason.startswith("cancelled:"):  # a policy abort: "cancelled: <why>"
        return EndCause.ABORTED
    if state == JobState.CANCELLED or reason.startswith("cancelled"):
        return EndCause.CANCELLED
    return None


def ended_before_abort(events: list[dict[str, Any]], status: dict[str, Any] | None) -> bool:
    """Whether an aborting job had already completed (exit 0) when its abort was decided: its window
    expired in the moment between its end and the launcher reaping it. It is then accounted as completed,
    not requeued to run again."""
    if not status or status.get("exit_code") != 0 or status.get("end_time") is None:
        return False
    aborts = [e["time"] for e in events if e["kind"] == "abort"]
    return bool(aborts) and status["end_time"] <= aborts[-1]


def end_cause_for(job: JobRecord, exit_code: int | None, have_status: bool) -> EndCause:
    """Why a job whose shim is gone ended: the stop the launcher asked for, else its exit status."""
    if job.end_cause is not None:
        return EndCause(job.end_cause)
    if not have_status:
        return EndCause.LOST
    return EndCause.COMPLETED if exit_code == 0 else EndCause.FAILED


# -- transitions: each is one transaction (the row and its event) -------------------------------------
def cancel_queued(store: Store, job: JobRecord, reason: str) -> None:
    """A queued job is cancelled: it ends at once (its cancel and its one end event)."""
    end = {"exit_code": None, "state": JobState.CANCELLED.value, "end_cause": EndCause.CANCELLED.value}
    store.update_logged(job.id, [("cancel", {}), ("end", end)], state=JobState.CANCELLED.value,
                        end_cause=EndCause.CANCELLED.value, end_time=time.time(), reason=reason)  # fmt: skip


def stopping(store: Store, job: JobRecord, cause: EndCause, reason: str, event: str, requeue: bool = False,
             data: dict[str, Any] | None = None) -> None:  # fmt: skip
    """The launcher is stopping a started job for `cause` (requeue: it goes back to the queue after)."""
    if requeue:
        store.update(job.id, event, data, state=JobState.ABORTING.value, reason=reason)
    else:
        # An aborting job that is cancelled now ends (cancelled) instead of going back to the queue.
        store.update(job.id, event, data, state=JobState.RUNNING.value, end_cause=cause.value, reason=reason)


def requeue(store: Store, job: JobRecord, why: str) -> None:
    """Back to the queue: its window expired under "abort", or it never really started."""
    store.update(job.id, "requeue", {"why": why}, state=JobState.QUEUED.value, start_time=None, nranks=None,
                 shim_pid=None, backfilled=0, window_end=None, suspended=0, end_cause=None, reason=why,
                 requeues=job.requeues + (job.state == JobState.ABORTING))  # fmt: skip


def ended(store: Store, job: JobRecord, cause: EndCause, exit_code: int | None, end: float,
          cpu_seconds: float | None, reason: str | None = None) -> JobState:  # fmt: skip
    state = END_STATE[cause]
    extra = {} if reason is None else {"reason": reason}
    store.update(job.id, "end", {"exit_code": exit_code, "state": state.value, "end_cause": cause.value},
                 state=state.value, end_cause=cause.value, end_time=end, exit_code=exit_code, shim_pid=None,
                 cpu_seconds=cpu_seconds, **extra)  # fmt: skip
    return state


# -- the start ----------------------------------------------------------------------------------------
class StartFailed(Exception):
    """A start step failed; the job is back in the state `state` (queued or failed), nothing of it runs."""

    def __init__(self, step: str, state: JobState, error: BaseException) -> None:
        super().__init__(f"start failed at {step}: {error}")
        self.step, self.state, self.error = step, state, error


@dataclass(frozen=True)
class StartPlan:
    nranks: int
    max_mpl: int
    queue: str
    running: dict[str, Any]  # columns recorded with the start (backfilled, window_end, run_estimate)
    data: dict[str, Any]  # the start event's data


@dataclass
class StartSteps:
    """The side effects of a start, given by the launcher (the CPU manager client, the runner)."""

    admit: Callable[[], None]
    release: Callable[[], None]
    spawn: Callable[[], subprocess.Popen]
    watch: Callable[[subprocess.Popen], None]
    unwatch: Callable[[], None]
    set_leader: Callable[[int], None]
    go: Callable[[subprocess.Popen], None]
    fault: Callable[[str], None]  # raises where test-only fault injection says


def start(store: Store, job: JobRecord, plan: StartPlan, steps: StartSteps,
          create_time: Callable[[int], float | None]) -> subprocess.Popen:  # fmt: skip
    """Start a queued job, all or nothing. Returns the shim, which has been given its go; raises
    `StartFailed` after undoing every step done so far."""
    done: list[str] = []
    proc: subprocess.Popen | None = None
    step = START_STEPS[0]
    try:
        steps.fault(step)
        steps.admit()
        done.append(step)
        step = "store"
        steps.fault(step)
        store.update(job.id, state=JobState.STARTING.value, nranks=plan.nranks, cur_max_mpl=plan.max_mpl)
        done.append(step)
        step = "spawn"
        steps.fault(step)
        proc = steps.spawn()
        steps.watch(proc)
        done.append(step)
        step = "set_leader"
        steps.fault(step)
        steps.set_leader(proc.pid)
        step = "mark_running"
        steps.fault(step)
        store.update(job.id, "start", plan.data, state=JobState.RUNNING.value, start_time=time.time(),
                     shim_pid=proc.pid, shim_start=create_time(proc.pid), **plan.running)  # fmt: skip
        step = "go"
        steps.fault(step)
        steps.go(proc)  # only now, with the start recorded, may the job really run
        return proc
    except Exception as e:  # every failure is undone, whatever raised it
        state = _undo(store, job, step, e, done, proc, steps)
        raise StartFailed(step, state, e) from e


def _undo(store: Store, job: JobRecord, step: str, error: Exception, done: list[str],
          proc: subprocess.Popen | None, steps: StartSteps) -> JobState:  # fmt: skip
    """Undo the steps done, newest first; record where the job is now (queued or failed)."""
    if proc is not None:  # the shim has not had its go: nothing but it runs (its own process group)
        _kill_shim(proc)
        steps.unwatch()
    if "admit" in done:
        try:
            steps.release()
        except (ProtocolError, DaemonUnavailable) as e:  # it releases the job itself when the leader exits
            log.warning("job %d: releasing a failed start: %s", job.id, e)
    # Nothing was done, or the CPU manager could not be reached: the job waits for a later pass. Any other
    # failure would likely repeat: the job fails with the step in its reason.
    transient = step == "admit" or isinstance(error, DaemonUnavailable)
    state = JobState.QUEUED if transient else JobState.FAILED
    reason = f"start failed at {step}: {error}" + ("; requeued" if transient else "")
    if step == "admit":  # nothing to undo or record (the row is still queued); no event per retried pass
        return state
    try:
        if transient:
            store.update(job.id, "start_failed", {"step": step, "error": str(error)}, state=state.value,
                         nranks=None, cur_max_mpl=None, shim_pid=None, start_time=None, reason=reason)  # fmt: skip
        else:  # its one end event, with the step
            cause = EndCause.START_FAILED.value
            data = {"exit_code": None, "state": state.value, "end_cause": cause, "step": step, "error": str(error)}
            store.update(job.id, "end", data, state=state.value, end_cause=cause, end_time=time.time(),
                         shim_pid=None, reason=reason)  # fmt: skip
    except Exception:  # the store itself fails: the row keeps what it had (queued, or starting -> requeued
        log.exception("job %d: recording its failed start", job.id)  # by `recover` at the next start)
    return state


def _kill_shim(proc: subprocess.Popen) -> None:
    """SIGKILL the shim's process group by its pid (it leads it; before its go it has started nothing)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    proc.wait()
