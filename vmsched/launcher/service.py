"""The launcher's state and actions: request handlers, the scheduling pass, job start and end.

The scheduling pass is: snapshot of the store -> `vmsched.launcher.policy.decide` (pure) -> apply the
decisions to the CPU manager and to real processes. The daemon module wires this to a socket and a
clock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pwd
import signal
import subprocess
import time
from math import ceil
from typing import Any

import psutil

from vmsched.config import Config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.faults import Faults, InjectedFault
from vmsched.launcher import lifecycle, runner
from vmsched.launcher.dependencies import checked_dependency, creates_cycle, hold_reason
from vmsched.launcher.energy import EnergyMeter, cpu_seconds_between, split_energy
from vmsched.launcher.lifecycle import ACTIVE, FINISHED, HOLDING, EndCause, JobState, StartFailed, StartPlan, StartSteps
from vmsched.launcher.policy.config import PolicyConfig, parse_policy_spec
from vmsched.launcher.policy.core import can_ever_start, decide, hold_idle_cpus, next_event_time
from vmsched.launcher.policy.decisions import Abort, Decision, Mold, Resume, SetMaxMpl, Start, Suspend
from vmsched.launcher.policy.reasons import PAUSED, pending_reasons
from vmsched.launcher.policy.snapshot import QueuedJob, RunningJob, Snapshot
from vmsched.launcher.requests import RequestError, validate_submission
from vmsched.launcher.store import JobRecord, Store
from vmsched.logs import event
from vmsched.proctrack import ExitWatcher
from vmsched.protocol import DaemonUnavailable, Peer, ProtocolError, get_int
from vmsched.vmruntime.supervisor import HYDRA_EXIT_S

log = logging.getLogger("vm-launcher")

# The shim kills a job's ranks [jobs] kill_grace_s after SIGTERM (vmsched/vmruntime/supervisor.py); the
# launcher SIGKILLs the whole process group only if even that has not ended it this much later.
BACKSTOP_S = HYDRA_EXIT_S + 1.0


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


PASS_RETRY_S = 1.0  # a scheduling pass that raised is tried again this much later (not in a loop)


class Launcher:
    def __init__(self, cfg: Config, store: Store, cpu: CpuManagerClient, policy: PolicyConfig,
                 faults: Faults | None = None) -> None:  # fmt: skip
        self.faults = faults or Faults()  # test-only fault injection (vmsched/faults.py)
        self.start_faults_fired: set[str] = set()
        self.passes = 0
        self.cfg = cfg
        self.store = store
        self.cpu = cpu
        self.policy = policy
        self.children: dict[int, subprocess.Popen] = {}  # shims this incarnation started
        self.exits = ExitWatcher()
        self.kill_deadline: dict[int, float] = {}  # job id -> when SIGKILL follows SIGTERM
        self.partitions: dict[int, dict[str, Any]] = {}  # last sampled partition per running job
        self.ncpus = 0
        self.paused = store.meta("paused") == "1"
        self.dirty = True  # something happened: run a scheduling pass
        self.next_event: float | None = None  # when the policy wants another look (window expiry)
        self.last_pass = 0.0
        self.dirty_since: float | None = None  # when the pending pass became due
        self.last_sample = 0.0
        self.reasons: dict[int, str] = {}  # job id -> pending reason, from the last scheduling pass
        lc = cfg.launcher
        self.meter = EnergyMeter(lc.energy_source, lc.rapl_root, lc.power_idle_w, lc.power_max_w)
        self.segments: dict[int, list[tuple[float, int]]] = {}  # job -> partition sizes since the last reading
        # Jobs whose shim has written its end but that are not reaped yet: their energy ends at that end.
        self.energy_ended: set[int] = set()
        self.energy_last = time.time()

    # -- startup ---------------------------------------------------------------------------------
    def recover(self) -> None:
        """After a restart: find the shims of running jobs again, account those that ended meanwhile,
        requeue those that never started. No job is lost and none is started twice."""
        self.ncpus = self.cpu.free()["ncpus"]
        for job in self.store.jobs(HOLDING):
            pid = job.shim_pid
            alive = pid is not None and _same_process(pid, job.shim_start)
            if alive and self.exits.watch(job.id, pid):
                event(log, "recover", job=job.id, user=job.user, shim=pid)
                if job.state == JobState.STARTING:  # recorded but never given its go: it exits on EOF
                    self.store.update(job.id, "recovered", state=JobState.RUNNING.value)
                continue
            self._ended(job)
        self._release_unrecorded()

    def _release_unrecorded(self) -> None:
        """A launcher that died between a start's admit and its store step left an admission that no job
        of the store holds (its leader was never set, so the CPU manager would keep it): release it."""
        try:
            admitted = [j["job"] for j in self.cpu.status()["jobs"]]
        except (DaemonUnavailable, ProtocolError) as e:
            log.warning("CPU manager status: %s", e)
            return
        for job_id in admitted:
            job = self.store.job(job_id)  # None: not the launcher's (a vmrun job)
            if job is not None and job.state not in HOLDING:
                try:
                    self.cpu.release(job_id)
                except (DaemonUnavailable, ProtocolError) as e:
                    log.warning("job %d: releasing its unrecorded admission: %s", job_id, e)
                    continue
                why = "admitted by a start the launcher never recorded"
                event(log, "release", job=job_id, user=job.user, reason=why)

    # -- request handlers ------------------------------------------------------------------------
    def handlers(self) -> dict[str, Any]:
        plain = {
            "submit": self.submit, "queue": self.queue, "cancel": self.cancel, "acct": self.acct,
            "job": self.job_info, "ping": lambda m: {"pid": os.getpid()}, "pause": self.pause,
            "info": self.info, "set_policy": self.set_policy,
        }  # fmt: skip
        return {op: self._injected(op, fn) if op in self.faults.handlers else fn for op, fn in plain.items()}

    @staticmethod
    def _injected(op: str, fn: Any) -> Any:
        def fail(msg: dict[str, Any]) -> dict[str, Any]:
            raise InjectedFault(f"injected fault in handler {op!r}")

        return fail

    def _peer(self, msg: dict[str, Any]) -> Peer:
        peer = msg.get("_peer")
        if not isinstance(peer, Peer):
            raise ProtocolError("cannot tell who sent this request")
        return peer

    def submit(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self._peer(msg)
        now = time.time()
        try:
            sub = validate_submission(msg, self.cfg.launcher, self.ncpus, self.policy.max_mpl_limit, now)
            deps = checked_dependency(msg.get("dependency"))
        except RequestError as e:
            raise ProtocolError(str(e)) from None
        self._check_dependencies(peer, deps)
        probe = QueuedJob(0, now, "", sub.procs, sub.max_mpl, sub.job_class, sub.estimate, sub.deadline)
        if not can_ever_start(probe, self.ncpus, self.policy):
            raise ProtocolError(f"policy {self.policy.spec()} would never start this job on {self.ncpus} CPUs, "
                                f"not even folded as far as allowed (ranks {list(sub.procs)}, max MPL "
                                f"{sub.max_mpl or 'any'}, policy limit {self.policy.max_mpl_limit})")  # fmt: skip
        job_id = self.store.add_job(
            uid=peer.uid, gid=peer.gid, user=user_name(peer.uid), name=sub.name, command=sub.command,
            cwd=sub.cwd, env=sub.env, stdout=sub.stdout, stderr=sub.stderr, procs=list(sub.procs),
            max_mpl=sub.max_mpl, job_class=sub.job_class, estimate=sub.estimate, time_limit=sub.time_limit,
            deadline=sub.deadline, submit_time=now, dependency=[list(d) for d in deps], begin_time=sub.begin_time,
        )  # fmt: skip
        self.dirty = True
        event(log, "submit", job=job_id, user=user_name(peer.uid), name=sub.name, ranks=sub.procs,
              job_class=sub.job_class, estimate_s=sub.estimate)  # fmt: skip
        return {"job": job_id, "job_class": sub.job_class, "estimate": sub.estimate}

    def _check_dependencies(self, peer: Peer, deps: tuple[tuple[str, int], ...]) -> None:
        """No cycle (the id this job will get among the jobs it waits for, even through others); each job
        depended on exists and is the submitter's own (root: anyone's)."""

        def deps_of(j: int) -> list[tuple[str, int]]:
            job = self.store.job(j)
            return [] if job is None else [(k, i) for k, i in job.dependency]

        new_id = self.store.next_id()
        if creates_cycle(new_id, deps, deps_of):
            raise ProtocolError(f"dependency cycle: job {new_id} (this one) would wait for itself")
        for _, j in deps:
            job = self.store.job(j)
            if job is None:
                raise ProtocolError(f"dependency on unknown job {j}")
            if not self._visible(job, peer):
                raise ProtocolError(f"dependency on job {j}, which belongs to {job.user}")

    def _visible(self, job: JobRecord, peer: Peer) -> bool:
        return peer.uid == 0 or peer.uid == job.uid

    def _owned(self, msg: dict[str, Any]) -> JobRecord:
        peer = self._peer(msg)
        job_id = get_int(msg, "job", minimum=1)
        job = self.store.job(job_id)
        if job is None:
            raise ProtocolError(f"unknown job {job_id}")
        if not self._visible(job, peer):
            raise ProtocolError(f"job {job_id} belongs to {job.user}; only they or root may do that")
        return job

    def queue(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self._peer(msg)
        jobs = []
        for job in self.store.jobs(ACTIVE):
            d = job.public(full=self._visible(job, peer))
            del d["energy_j"]  # accounted as the job runs; shown by vmacct once it has ended
            d["partition"] = self.partitions.get(job.id)
            d["pending_reason"] = self.reasons.get(job.id) if job.state == JobState.QUEUED or job.suspended else None
            jobs.append(d)
        return {"policy": self.policy.spec(), "paused": self.paused, "ncpus": self.ncpus, "jobs": jobs}

    def job_info(self, msg: dict[str, Any]) -> dict[str, Any]:
        job = self._owned(msg)
        return {"job": dict(job.public(full=True), pending_reason=self.reasons.get(job.id)),
                "events": self.store.events(job.id), "partition": self.partitions.get(job.id)}  # fmt: skip

    def acct(self, msg: dict[str, Any]) -> dict[str, Any]:
        peer = self._peer(msg)
        limit = get_int(msg, "limit", minimum=1, default=1000)
        uid = None if peer.uid == 0 else peer.uid
        user = msg.get("user")
        if user is not None:
            try:
                wanted = pwd.getpwnam(user).pw_uid if isinstance(user, str) else None
            except KeyError:
                raise ProtocolError(f"unknown user {user!r}") from None
            if wanted is None:
                raise ProtocolError("argument 'user' must be a user name")
            if uid is not None and wanted != uid:
                raise ProtocolError(f"only root may see the jobs of {user}")
            uid = wanted
        since, until = (_time_arg(msg, k) for k in ("start", "end"))
        ids = msg.get("jobs")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise ProtocolError("argument 'jobs' must be a list of job ids")
            found = [self.store.job(i) for i in ids]
            jobs = [j for j in found if j is not None and j.state in FINISHED and (uid is None or j.uid == uid)]
        else:
            jobs = self.store.finished(uid=uid, since=since, until=until, limit=limit)
        return {"jobs": [dict(j.public(full=True), history=self._history(j.id)) for j in jobs]}

    def _history(self, job_id: int) -> list[dict[str, Any]]:
        return [e for e in self.store.events(job_id) if e["kind"] in ("start", "partition", "set_mpl", "end")]

    def cancel(self, msg: dict[str, Any]) -> dict[str, Any]:
        job = self._owned(msg)
        if job.state in FINISHED:
            raise ProtocolError(f"job {job.id} already ended ({job.state})")
        if job.state == JobState.QUEUED:
            lifecycle.cancel_queued(self.store, job, "cancelled by user")
        else:
            lifecycle.stopping(self.store, job, EndCause.CANCELLED, "cancelled by user", "cancel")
            self._kill(job)
        self.dirty = True
        event(log, "cancel", job=job.id, user=job.user, by=user_name(self._peer(msg).uid), was=job.state)
        return {"job": job.id, "was": job.state}

    def pause(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Hold the queue (root): jobs are accepted, none is started; running jobs go on."""
        if self._peer(msg).uid != 0:
            raise ProtocolError("only root may pause or resume the queue")
        paused = msg.get("paused")
        if not isinstance(paused, bool):
            raise ProtocolError("argument 'paused' must be true or false")
        self.paused = paused
        self.store.set_meta("paused", "1" if paused else "0")
        self.dirty = True
        return {"paused": paused}

    def set_policy(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Switch the policy (root, idle node only): how `vmreplay` runs one workload under several."""
        if self._peer(msg).uid != 0:
            raise ProtocolError("only root may change the policy")
        spec = msg.get("policy")
        if not isinstance(spec, str):
            raise ProtocolError("argument 'policy' must be a policy spec string")
        try:
            policy = parse_policy_spec(spec)
        except ValueError as e:
            raise ProtocolError(str(e)) from None
        busy = self.store.count(ACTIVE)
        if busy:
            raise ProtocolError(f"{busy} job(s) queued or running; the policy can only change on an idle node")
        event(log, "set_policy", policy=policy.spec(), was=self.policy.spec())
        self.policy = policy
        self.dirty = True
        return {"policy": policy.spec()}

    def info(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {
            "policy": self.policy.spec(), "paused": self.paused, "ncpus": self.ncpus,
            "queued": self.store.count((JobState.QUEUED,)), "running": self.store.count(HOLDING),
            "energy": {"source": self.meter.source, "time": self.energy_last,
                       "node_j": float(self.store.meta("energy_node_j") or 0),
                       "unattributed_j": float(self.store.meta("energy_unattributed_j") or 0)},
        }  # fmt: skip

    # -- events ----------------------------------------------------------------------------------
    def tick(self, now: float) -> float:
        """Everything time-driven; returns the seconds until it wants to run again. Cheap when nothing
        is due: the queue itself is only read in a scheduling pass, at most one per sched_interval."""
        self.reap()
        self.check_overruns(now)
        sample = self.cfg.launcher.sample_ms / 1000
        if now - self.last_sample >= sample:
            self.sample_partitions(now)
        energy_every = self.cfg.launcher.energy_interval_s
        if now - self.energy_last >= energy_every:
            self.account_energy(now)
        if self.next_event is not None and now >= self.next_event:
            self.dirty = True
        interval = self.cfg.launcher.sched_interval_ms / 1000
        # A pass runs one interval after the first event that made it due, so that events arriving
        # together (a burst of submissions, a trace's simultaneous arrivals) are decided together, as
        # the simulator decides all events of one instant at once.
        if self.dirty and self.dirty_since is None:
            self.dirty_since = now
        if self.dirty and now - self.dirty_since >= interval:
            try:
                self.schedule(now)
            except Exception:  # a failing pass is logged and retried; the daemon and its jobs go on
                log.exception("scheduling pass failed; retrying in %.0f s", PASS_RETRY_S)
                self.dirty, self.dirty_since = True, now + PASS_RETRY_S - interval
            if self.dirty and self.dirty_since is None:  # a decision could not be applied: try again
                self.dirty_since = now
        wake = min(sample, max(0.0, self.energy_last + energy_every - now))
        if self.dirty:
            wake = min(wake, max(0.0, self.dirty_since + interval - now))
        if self.next_event is not None:
            wake = min(wake, max(0.0, self.next_event - now))
        for deadline in self.kill_deadline.values():
            wake = min(wake, max(0.0, deadline - now))
        return wake

    def reap(self) -> None:
        for key in self.exits.exited():
            job = self.store.job(key)
            self.exits.unwatch(key)
            child = self.children.pop(key, None)
            if child is not None:
                child.wait()
            if job is not None:
                self._ended(job)

    def _ended(self, job: JobRecord) -> None:
        """The job's shim is gone: account it, or requeue it if it never started / was aborted."""
        self.kill_deadline.pop(job.id, None)
        self.partitions.pop(job.id, None)
        try:
            self.cpu.release(job.id)
        except ProtocolError:
            pass  # the CPU manager already noticed the leader's exit
        except DaemonUnavailable:
            event(log, "release", logging.WARNING, job=job.id, reason="the CPU manager did not answer")
        status = runner.read_status(self.cfg, job.id)
        now = time.time()
        self.energy_ended.discard(job.id)
        segments = self.segments.get(job.id)
        if segments is not None:  # its partition is gone from its end on; its energy is accounted up to then
            segments.append((max(segments[-1][0], min(now, (status or {}).get("end_time") or now)), 0))
            self.account_energy(now)
        # The shim said so, or the launcher died before the shim was even spawned.
        never_started = (status is None and job.state == JobState.STARTING) or (
            status is not None and not status["started"])  # fmt: skip
        # Its window expired after it had completed, before it was reaped: done, not to be run again.
        done_first = job.state == JobState.ABORTING and lifecycle.ended_before_abort(self.store.events(job.id), status)
        if done_first:
            job = dataclasses.replace(job, end_cause=EndCause.COMPLETED.value)
        if not done_first and (job.state == JobState.ABORTING or (never_started and job.end_cause is None)):
            # else: stopped on purpose
            why = "window expired: requeued" if job.state == JobState.ABORTING else "never started: requeued"
            lifecycle.requeue(self.store, job, why)
            event(log, "requeue", job=job.id, user=job.user, reason=why)
        else:
            code = status.get("exit_code") if status else None
            end = (status or {}).get("end_time") or now
            cause = lifecycle.end_cause_for(job, code, status is not None)
            reason = "the job's shim vanished without a status" if cause == EndCause.LOST and status is None else None
            if done_first:
                reason = "completed before its expired window's abort took effect"
            cpu_s = _cpu_seconds(self.store.events(job.id), job.start_time, end)
            state = lifecycle.ended(self.store, job, cause, code, end, cpu_s, reason)
            event(log, "end", job=job.id, user=job.user, state=state.value, exit_code=code, end_cause=cause.value,
                  reason=reason or job.reason or None)  # fmt: skip
        self.dirty = True

    def account_energy(self, now: float) -> None:
        """Read (or model) the node's energy since the last reading and split it among the jobs by their
        CPU-seconds in that interval (vmsched.launcher.energy)."""
        t0, self.energy_last = self.energy_last, now
        if now <= t0 or not self.ncpus:
            return
        active = {j.id for j in self.store.jobs(HOLDING)}
        for j, seg in self.segments.items():
            if j not in active and seg[-1][1]:  # gone without _ended seeing a partition (CPU manager lagging)
                seg.append((max(seg[-1][0], t0), 0))
            elif seg[-1][1]:
                # Ended but not reaped yet (the shim's interpreter is still exiting): its CPU-seconds, and so
                # its energy, end at the end its shim wrote, not at this reading.
                end = (runner.read_status(self.cfg, j) or {}).get("end_time")
                if end is not None:
                    seg.append((max(seg[-1][0], min(end, now)), 0))
                    self.energy_ended.add(j)
        cpu_s = {j: cpu_seconds_between(seg, t0, now) for j, seg in self.segments.items()}
        node = self.meter.interval_energy(now - t0, self.ncpus, sum(cpu_s.values()))
        shares, rest = split_energy(node, now - t0, self.ncpus, self.cfg.launcher.power_idle_w, cpu_s)
        self.store.add_energy({j: e for j, e in shares.items() if e > 0}, node, rest)
        for j, seg in list(self.segments.items()):  # keep each job's size from now on; forget ended ones
            cpus = seg[-1][1]
            if cpus == 0:
                del self.segments[j]
            else:
                self.segments[j] = [(now, cpus)]

    def check_overruns(self, now: float) -> None:
        for job_id, deadline in list(self.kill_deadline.items()):
            if now >= deadline:
                job = self.store.job(job_id)
                if job and job.shim_pid:
                    runner.kill(job.shim_pid, signal.SIGKILL)
                del self.kill_deadline[job_id]
        if self.cfg.launcher.overrun != "kill":
            return
        for job in self.store.jobs((JobState.RUNNING,)):
            if job.time_limit and job.start_time and job.id not in self.kill_deadline and not job.suspended:
                if now > job.start_time + job.time_limit + self.cfg.launcher.overrun_grace_s:
                    lifecycle.stopping(self.store, job, EndCause.KILLED_AT_LIMIT,
                                       f"time limit {job.time_limit:.0f}s exceeded", "timeout")  # fmt: skip
                    self._kill(job)

    def _kill(self, job: JobRecord) -> None:
        if job.shim_pid:
            runner.kill(job.shim_pid)
            self.kill_deadline[job.id] = time.time() + self.cfg.jobs.kill_grace_s + BACKSTOP_S

    def sample_partitions(self, now: float) -> None:
        """Record each running job's partition changes (CPUs, MPL, queue type) into its history."""
        self.last_sample = now
        try:
            st = self.cpu.status()
        except (DaemonUnavailable, ProtocolError) as e:
            log.warning("CPU manager status: %s", e)
            return
        for j in st["jobs"]:
            cur = {"cpus": j["cpus"], "mpl": j["mpl"], "queue": j["queue"], "lbd": j["lbd"], "ip": j["ip"],
                   "cvcs": j["cvcs"], "max_mpl": j["max_mpl"]}  # fmt: skip
            old = self.partitions.get(j["job"])
            if j["job"] not in self.energy_ended:
                seg = self.segments.setdefault(j["job"], [(now, len(j["cpus"]))])
                if seg[-1][1] != len(j["cpus"]):
                    seg.append((now, len(j["cpus"])))
            key = ("cpus", "mpl", "queue", "lbd")
            if old is None or any(old[k] != cur[k] for k in key):
                if self.store.job(j["job"]) is not None:
                    self.store.log(j["job"], "partition", cur, now)
            self.partitions[j["job"]] = cur

    # -- scheduling ------------------------------------------------------------------------------
    def eligible(self, now: float) -> tuple[list[JobRecord], dict[int, str]]:
        """Queued jobs the policy may see, and the others with why not (dependency, begin time)."""
        ready, held = [], {}
        for j in self.store.jobs((JobState.QUEUED,)):
            states = {}
            for _, d in j.dependency:
                dep = self.store.job(d)
                if dep is not None:
                    states[d] = dep.state
            why = hold_reason([(k, d) for k, d in j.dependency], j.begin_time, states, now)
            if why is None:
                ready.append(j)
            else:
                held[j.id] = why
        return ready, held

    def snapshot(self, now: float, ready: list[JobRecord] | None = None) -> Snapshot:
        """What the policy sees; `ready`: the eligible queued jobs, if already read."""
        queue = tuple(
            QueuedJob(j.id, j.submit_time, j.user, j.procs, j.max_mpl, j.job_class, j.estimate, j.deadline)
            for j in (self.eligible(now)[0] if ready is None else ready)
        )
        running = []
        for j in self.store.jobs(HOLDING):
            part = self.partitions.get(j.id)
            n, m = j.nranks or j.procs[0], j.cur_max_mpl or 1
            cpus = len(part["cpus"]) if part else ceil(n / m)
            # An aborting job holds its CPUs until it is gone, but its window is dealt with.
            backfilled = j.backfilled and j.state != JobState.ABORTING
            running.append(RunningJob(
                j.id, n, m, cpus, j.start_time or now, j.run_estimate or j.estimate, j.job_class,
                backfilled, j.window_end, j.suspended, j.submit_time, j.max_mpl,
            ))  # fmt: skip
        return Snapshot(now, self.ncpus, queue, tuple(running))

    def schedule(self, now: float) -> None:
        self.dirty, self.dirty_since = False, None
        self.last_pass = now
        self.passes += 1
        if self.passes in self.faults.steps:
            raise InjectedFault(f"injected fault in scheduling pass {self.passes}")
        if self.paused:
            self.next_event = None
            self.reasons = {j.id: PAUSED for j in self.store.jobs((JobState.QUEUED,))}
            self._tell_queue_state(False)
            return
        for d in decide(self.snapshot(now), self.policy):
            try:
                self.apply(d, now)
            except (ProtocolError, DaemonUnavailable, OSError) as e:
                log.warning("could not apply %s: %s", d, e)
                self.dirty = True
        ready, held = self.eligible(now)
        after = self.snapshot(now, ready)
        requeued = [j.id for j in ready if j.requeues > 0]
        self.reasons = {**pending_reasons(after, self.policy, requeued=requeued), **held}
        begins = [j.begin_time for j in self.store.jobs((JobState.QUEUED,)) if j.begin_time and j.begin_time > now]
        self.next_event = min([t for t in (next_event_time(after, self.policy), *begins) if t is not None],
                              default=None)  # fmt: skip
        self._tell_queue_state(hold_idle_cpus(after, self.policy))

    def _tell_queue_state(self, waiting: bool) -> None:
        try:
            self.cpu.set_queue_waiting(waiting)
        except (ProtocolError, DaemonUnavailable) as e:
            log.warning("CPU manager queue state: %s", e)

    def apply(self, d: Decision, now: float) -> None:
        fields = dataclasses.asdict(d)
        event(log, "decision", job=fields.pop("job_id"), decision=type(d).__name__.lower(), **fields)
        if isinstance(d, Start):
            self.start(d, now)
        elif isinstance(d, SetMaxMpl):
            self.cpu.set_max_mpl(d.job_id, d.max_mpl)
            self.store.update(d.job_id, "set_mpl", {"max_mpl": d.max_mpl, "why": d.reason}, cur_max_mpl=d.max_mpl)
        elif isinstance(d, Abort):
            job = self.store.job(d.job_id)
            if job and job.state == JobState.RUNNING:
                why = d.reason if d.requeue else "cancelled: " + d.reason
                lifecycle.stopping(self.store, job, EndCause.ABORTED, why, "abort", requeue=d.requeue,
                                   data={"why": d.reason})  # fmt: skip
                self._kill(job)
        elif isinstance(d, Suspend):
            self.cpu.suspend(d.job_id)
            self.store.update(d.job_id, "suspend", {"why": d.reason}, suspended=1)
        elif isinstance(d, Resume):
            self.cpu.resume(d.job_id)
            self.store.update(d.job_id, "resume", {"why": d.reason}, suspended=0, window_end=d.window_end)
        elif isinstance(d, Mold):
            self.store.update(d.job_id, "mold", {"nranks": d.nranks, "estimate": d.estimate, "why": d.reason},
                              procs=json.dumps([d.nranks]), estimate=d.estimate)  # fmt: skip

    def start(self, d: Start, now: float) -> None:
        """All or nothing (lifecycle.start): the job runs, or is queued or failed with nothing of it left."""
        job = self.store.job(d.job_id)
        if job is None or job.state != JobState.QUEUED:
            return
        plan = StartPlan(
            d.nranks, d.max_mpl, self.cfg.launcher.queue_type,
            running={"backfilled": int(d.backfilled), "window_end": d.window_end,
                     "run_estimate": d.estimate or job.estimate},
            data={"nranks": d.nranks, "max_mpl": d.max_mpl, "backfilled": d.backfilled, "why": d.reason},
        )  # fmt: skip

        def watch(proc: subprocess.Popen) -> None:
            self.children[job.id] = proc
            self.exits.watch(job.id, proc.pid)

        def unwatch() -> None:
            self.children.pop(job.id, None)
            self.exits.unwatch(job.id)

        steps = StartSteps(
            admit=lambda: self.cpu.admit(job.id, d.nranks, d.max_mpl, queue=plan.queue, uid=job.uid),
            release=lambda: self.cpu.release(job.id), spawn=lambda: runner.spawn(self.cfg, job, d.nranks),
            watch=watch, unwatch=unwatch, set_leader=lambda pid: self.cpu.set_leader(job.id, pid), go=runner.go,
            fault=self._start_fault,
        )  # fmt: skip
        try:
            lifecycle.start(self.store, job, plan, steps, _create_time)
        except StartFailed as e:
            event(log, "start_failed", logging.WARNING, job=job.id, user=job.user, step=e.step, error=str(e.error),
                  now=e.state.value)  # fmt: skip
            self.dirty = True
            return
        event(log, "start", job=job.id, user=job.user, ranks=d.nranks, max_mpl=d.max_mpl, backfilled=d.backfilled,
              reason=d.reason)  # fmt: skip

    def _start_fault(self, step: str) -> None:
        """Test-only: the first start that reaches a step named in VMSCHED_LAUNCHER_FAULTS' start= fails."""
        if step in self.faults.start and step not in self.start_faults_fired:
            self.start_faults_fired.add(step)
            raise InjectedFault(f"injected fault in start step {step!r}")

    def close(self) -> None:
        self.exits.close()


def _time_arg(msg: dict[str, Any], key: str) -> float | None:
    v = msg.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
        raise ProtocolError(f"argument {key!r} must be a time in seconds since the epoch")
    return None if v is None else float(v)


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid: int, start: float | None) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and (start is None or abs(p.create_time() - start) < 0.01)
    except psutil.Error:
        return False


def _cpu_seconds(events: list[dict[str, Any]], start: float | None, end: float) -> float | None:
    """CPU-seconds the job held: its partition size integrated over time (from its history)."""
    if start is None:
        return None
    total, t, cpus = 0.0, start, 0
    for e in events:
        if e["kind"] == "partition" and e["time"] >= start:
            total += cpus * (min(e["time"], end) - t)
            t, cpus = max(e["time"], start), len(e["cpus"])
    return total + cpus * max(0.0, end - t)


def load_policy(cfg: Config, spec: str | None = None) -> PolicyConfig:
    return parse_policy_spec(spec or cfg.launcher.policy)
