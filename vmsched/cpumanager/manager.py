"""The CPU manager's state and actions: request handlers and the per-quantum reconcile.

It reads the shared table, calls the pure functions (`partition`, `lbd`) and applies their results
(table writes, affinity, signals). The daemon module only wires it to a socket and a clock.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vmsched import faults
from vmsched.config import Config, CpuManagerConfig
from vmsched.cpumanager import processes as proc
from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.cpugroups import CpuGroups
from vmsched.cpumanager.lbd import LbdParams, LbdState, job_cpu_now, lbd_step, stalled_cpus, watched_rates
from vmsched.cpumanager.partition import AdmissionError, JobShape, minimum_partition, plan_partitions, rank_cpus
from vmsched.cpumanager.table import (
    ForeignTable,
    JobSegmentFile,
    JobView,
    SharedTable,
    TableError,
    TableFull,
    remove_table,
)
from vmsched.faults import Faults, InjectedFault
from vmsched.logs import event
from vmsched.proctrack import ExitWatcher, pidfd_alive
from vmsched.protocol import Peer, ProtocolError, get_int, get_str
from vmsched.vmruntime.shmclean import MPICH_PREFIX, mapped_segments, remove_owned, reported_segment

log = logging.getLogger("vm-cpumanager")

QUEUE_MODES = ("lbd", "local", "global")
PLACEMENTS = {name: code for code, name in L.PLACEMENT_NAMES.items()}
HEURISTICS = {name: code for code, name in L.HEURISTIC_NAMES.items()}
MAX_JOB_ID = 2**31 - 1
MAX_RANKS_PER_JOB = L.MAX_RANKS
MAX_UID = 2**32 - 2
# A job's ranks choose what its segment says: bound what that can cost the manager per quantum
# (process checks) and in its log (refusals).
MAX_CHECKS_PER_QUANTUM = 64
MAX_LOGGED_REFUSALS = 8


@dataclass
class _Rank:
    """A process the manager has verified (owner and ancestry) as a rank of a job, by (job id, pid).
    It stays managed until it exits or its job ends, whatever its slot says later: a job cannot
    take its processes out of the manager's hands (e.g. to escape a suspension) by rewriting slots."""

    pid: int
    job_id: int
    rank: int  # the slot it was verified from (its MPI rank)
    pidfd: int  # owned by the manager's ExitWatcher, closed when the rank is untracked
    pinned: tuple[int, ...] = ()
    stopped: bool = False  # the manager sent SIGSTOP and owes a SIGCONT
    user_time_us: int = 0


RankKey = tuple[int, int]  # (job id, pid)

FAULTS_ENV = "VMSCHED_CPUMANAGER_FAULTS"  # test-only fault injection (vmsched/faults.py)


def parse_faults(spec: str | None) -> Faults:
    return faults.parse_faults(spec, FAULTS_ENV, "quantum")


def _placement(state: LbdState) -> int:
    """The placement (shm_layout's PLACE_*) the detector's state puts the job's ranks in."""
    return L.PLACE_BLOCK if state.block else L.PLACE_CYCLIC


def _wkey(key: RankKey) -> tuple[str, int, int]:
    return ("rank", *key)


def lbd_params(cm: CpuManagerConfig) -> LbdParams:
    """The detector's parameters from the [cpumanager] options (every lbd_* one, and the quantum)."""
    return LbdParams(threshold=cm.lbd_threshold, stable_change=cm.lbd_stable_change,
                     stable_quanta=cm.lbd_stable_quanta, ip_quanta=cm.lbd_ip_quanta,
                     window_cpu_s=cm.lbd_window_cpu_ms / 1000, remeasure_quanta=cm.lbd_remeasure_quanta,
                     global_trial=cm.lbd_global_trial, block_trial=cm.lbd_placement_trial,
                     block_margin=cm.lbd_placement_margin, behind_share=cm.lbd_behind_share,
                     queue_trial=cm.lbd_queue_trial, sparse_global=cm.lbd_sparse_global,
                     quick_window=cm.lbd_quick_window, read_at_calls=cm.lbd_read_at_calls,
                     uneven_load=cm.lbd_uneven_load,
                     quantum_s=cm.quantum_ms / 1000)  # fmt: skip


class CpuManager:
    def __init__(self, cfg: Config, table: SharedTable, recovered: bool, faults: Faults | None = None) -> None:
        self.cfg = cfg
        self.faults = faults or Faults()
        self.table = table
        self.cpus = table.managed_cpus()
        self.lbd_params = lbd_params(cfg.cpumanager)
        self.lbd: dict[int, LbdState] = {}
        # job id -> (its CPUs, their idle seconds and the time, when last read; the idle seconds of its CPUs so far)
        self.idle_seen: dict[int, tuple[tuple[int, ...], tuple[float, ...], float, float]] = {}
        self.idle_now: tuple[int, float, dict[int, float]] = (-1, 0.0, {})  # (quantum, time, proc.cpu_idle_s())
        self.ranks: dict[RankKey, _Rank] = {}
        self.segs: dict[int, JobSegmentFile] = {}  # job id -> its job segment
        self.snaps: dict[int, np.ndarray] = {}  # job id -> last copy of its rank slots (untrusted)
        self.tracked: dict[int, np.ndarray] = {}  # job id -> verified pid each slot names now, 0 none
        self.rejected: dict[int, np.ndarray] = {}  # job id -> pid refused for each rank (not checked again)
        self.verified: dict[int, int] = {}  # job id -> ranks verified so far
        self.refusals: dict[int, int] = {}  # job id -> pids refused so far
        self.pinned_gen: dict[int, int] = {}  # job id -> generation its ranks were last pinned for
        self.changed_at: dict[int, int] = {}  # job id -> quantum of its last partition change
        # job id -> MPICH node segments its verified ranks mapped at registration: a job killed mid-run
        # (scancel of a Slurm step, which has no vmsched shim to clean up) leaves them, removed at release.
        self.mpi_segs: dict[int, set[str]] = {}
        # Jobs released once all their ranks have run and exited (admit one_shot); not kept across a restart
        # of the manager, after which such a job ends with its leader as any other.
        self.one_shot: set[int] = set()
        self.exits = ExitWatcher()
        # A CPU cgroup per job (see cpugroups.py): the jobs of a recovered table keep theirs.
        self.groups = CpuGroups.detect(cfg.instance, cfg.cpumanager.job_cpu_groups)
        self.groups.start({j.job_id for j in table.jobs()} if recovered else set())
        self.quanta = 0
        self.repartitions = 0  # partition changes, one per job per change (a metric)
        self.handoffs_retired = 0  # token hand-offs of ranks whose slots were freed (a metric)
        if recovered:
            self._recover()

    # -- startup ---------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Take over a table left by a manager that died: keep jobs, partitions and pins as found;
        ranks are verified afresh from their job segments."""
        for j in self.table.jobs():
            try:
                self._add_seg(j.job_id, j.nranks, JobSegmentFile.open(j.rt_name, j.nranks, j.uid))
            except (OSError, TableError) as e:
                log.warning("job %d: its job segment cannot be reopened (%s); its ranks run unmanaged", j.job_id, e)
            if j.lbd_phase in (L.LBD_MEASURING, L.LBD_STABLE):
                self.lbd[j.job_id] = LbdState()  # measurement restarts
            elif j.lbd_phase == L.LBD_DECIDED:  # decided jobs keep their queue and go on re-checking it
                self.lbd[j.job_id] = LbdState(L.LBD_DECIDED, j.cvcs, local=j.queue == L.QUEUE_LOCAL, decisions=1,
                                              block=j.placement == L.PLACE_BLOCK)  # fmt: skip
            if j.leader_pid and not self.exits.watch(("leader", j.job_id), j.leader_pid):
                event(log, "leader_gone", job=j.job_id, pid=j.leader_pid, reason="ended while no manager ran")
        with self.table.locked():
            self.table.set_manager_pid(os.getpid())
        event(log, "recover", jobs=len(self.table.jobs()))

    def _add_seg(self, job_id: int, nranks: int, seg: JobSegmentFile) -> None:
        self.segs[job_id] = seg
        self.tracked[job_id] = np.zeros(nranks, dtype=np.int64)
        self.rejected[job_id] = np.zeros(nranks, dtype=np.int64)
        self.verified[job_id] = 0

    # -- request handlers ------------------------------------------------------------------------
    def handlers(self) -> dict[str, Any]:
        plain = {
            "admit": self.admit, "release": self.release, "queue_state": self.queue_state,
            "status": self.status, "free": self.free, "register": self.register, "forget": self.forget,
            "suspend": self.suspend, "resume": self.resume, "set_mpl": self.set_mpl,
            "set_leader": self.set_leader, "ping": lambda m: {"pid": self.table.header.manager_pid},
        }  # fmt: skip
        return {op: self._boundary(op, fn) for op, fn in plain.items()}

    def _boundary(self, op: str, fn: Any) -> Any:
        """A failing handler becomes an error reply and a logged traceback, never the daemon's end."""

        def handle(msg: dict[str, Any]) -> dict[str, Any]:
            try:
                if op in self.faults.handlers:
                    raise InjectedFault(f"injected fault in handler {op!r}")
                return fn(msg)
            except ProtocolError:
                raise
            except Exception as e:
                log.exception("request %r failed", op)
                raise ProtocolError(f"internal error in {op!r}: {e}") from None

        return handle

    @staticmethod
    def _peer_uid(msg: dict[str, Any]) -> int:
        """Who asks: root for in-process calls (no "_peer" key); the kernel's word for socket requests
        (serve_one sets "_peer" after decoding, so a client cannot supply it)."""
        if "_peer" not in msg:
            return 0
        peer = msg["_peer"]
        if not isinstance(peer, Peer):
            raise ProtocolError("cannot tell who sent this request")
        return peer.uid

    def _root_only(self, msg: dict[str, Any], what: str) -> None:
        if self._peer_uid(msg) != 0:
            raise ProtocolError(f"only root may {what}")

    def _job(self, msg: dict[str, Any]) -> JobView:
        """The job a request names, if the requester may act on it (root, or the job's user)."""
        job_id = get_int(msg, "job", minimum=1)
        for j in self.table.jobs():
            if j.job_id == job_id:
                uid = self._peer_uid(msg)
                if uid not in (0, j.uid):
                    raise ProtocolError(f"job {job_id} belongs to uid {j.uid}; only they or root may do that")
                return j
        raise ProtocolError(f"unknown job {job_id}")

    def _own_process(self, msg: dict[str, Any], pid: int, what: str) -> None:
        """A non-root requester may name only its own processes."""
        uid = self._peer_uid(msg)
        if uid != 0 and proc.process_uid(pid) != uid:
            raise ProtocolError(f"process {pid} ({what}) is not yours")

    def admit(self, msg: dict[str, Any]) -> dict[str, Any]:
        job_id = get_int(msg, "job", minimum=1)
        if job_id > MAX_JOB_ID:
            raise ProtocolError(f"job id {job_id} too large")
        nranks = get_int(msg, "nranks", minimum=1)
        if nranks > MAX_RANKS_PER_JOB:
            raise ProtocolError(f"nranks {nranks} exceeds the limit of {MAX_RANKS_PER_JOB}")
        max_mpl = get_int(msg, "max_mpl", minimum=1, default=1)
        leader = get_int(msg, "leader_pid", minimum=0, default=0)
        spin_us = get_int(msg, "spin_us", minimum=0, default=0)
        # A one-shot job (a Slurm step) ends once all its ranks have run and exited, without waiting for its
        # leader; not by default: the launcher counts a job's CPUs as held until its shim (the leader) ends.
        one_shot = msg.get("one_shot", False)
        if not isinstance(one_shot, bool):
            raise ProtocolError(f"argument 'one_shot' must be true or false, got {one_shot!r}")
        peer_uid = self._peer_uid(msg)
        uid = get_int(msg, "uid", minimum=0, default=peer_uid)
        if uid > MAX_UID:
            raise ProtocolError(f"uid {uid} too large")
        if peer_uid not in (0, uid):
            raise ProtocolError("only root may admit a job for another user")
        mode = get_str(msg, "queue", QUEUE_MODES, self.cfg.cpumanager.default_queue)
        heuristic = get_str(msg, "heuristic", tuple(HEURISTICS), L.DEFAULT_HEURISTIC)
        # Which local queue each rank is in: the detector tries both on a job it decides local (module lbd:
        # "Placement trial"); fixed only with a fixed queue type.
        placement = get_str(msg, "placement", ("auto", *PLACEMENTS), "auto")
        if placement != "auto" and mode == "lbd":
            raise ProtocolError(f"placement {placement!r} needs a fixed queue (local or global): with lbd the "
                                "detector chooses it")  # fmt: skip
        if self.table.job_slot(job_id) is not None:
            raise ProtocolError(f"job {job_id} is already admitted")
        if leader and not proc.alive(leader):
            raise ProtocolError(f"no process {leader} (leader_pid)")
        if leader:
            self._own_process(msg, leader, "leader_pid")
        shapes = self._shapes() + [JobShape(job_id, nranks, max_mpl, 0)]
        plan = self._plan(shapes, f"cannot admit job {job_id} (needs {minimum_partition(nranks, max_mpl)} CPUs)")
        queue = L.QUEUE_LOCAL if mode == "local" else L.QUEUE_GLOBAL
        try:
            seg = JobSegmentFile.create(self.table.shm_name, job_id, nranks, uid)
        except OSError as e:
            raise ProtocolError(f"cannot create the segment of job {job_id}: {e}") from None
        with self.table.locked():
            try:
                slot = self.table.add_job(job_id, nranks, max_mpl, queue, HEURISTICS[heuristic], spin_us, leader,
                                          lbd=mode == "lbd", uid=uid, rt_name=seg.name,
                                          placement=PLACEMENTS.get(placement, L.PLACE_CYCLIC))  # fmt: skip
            except TableFull as e:
                seg.unlink()
                seg.close()
                raise ProtocolError(str(e)) from None
        self._add_seg(job_id, nranks, seg)
        if mode == "lbd":
            self.lbd[job_id] = LbdState()
        if one_shot:
            self.one_shot.add(job_id)
        if leader:
            self.exits.watch(("leader", job_id), leader)
        self._apply(plan)
        event(log, "admit", job=job_id, ranks=nranks, max_mpl=max_mpl, queue=mode, placement=placement,
              cpus=plan[job_id], uid=uid)  # fmt: skip
        return {"job": job_id, "slot": slot, "cpus": list(plan[job_id])}

    def set_mpl(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Change how far a running job may fold (the launcher's shrink / malleable expiry action)."""
        job = self._job(msg)
        max_mpl = get_int(msg, "max_mpl", minimum=1)
        shapes = [
            JobShape(s.job_id, s.nranks, max_mpl if s.job_id == job.job_id else s.max_mpl, s.current)
            for s in self._shapes()
        ]
        plan = self._plan(shapes, f"cannot set max MPL {max_mpl} for job {job.job_id}")
        with self.table.locked():
            self.table.set_max_mpl(job.slot, max_mpl)
        self._apply(plan)
        event(log, "set_mpl", job=job.job_id, max_mpl=max_mpl, was=job.max_mpl, cpus=plan[job.job_id])
        return {"job": job.job_id, "max_mpl": max_mpl, "cpus": list(plan[job.job_id])}

    def set_leader(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Name the process (e.g. mpiexec) whose exit ends the job; its ranks must descend from it."""
        job = self._job(msg)
        pid = get_int(msg, "pid", minimum=1)
        if not proc.alive(pid):
            raise ProtocolError(f"no process {pid}")
        self._own_process(msg, pid, "leader")
        if not self.exits.watch(("leader", job.job_id), pid):
            raise ProtocolError(f"no process {pid}")
        with self.table.locked():
            self.table.set_leader(job.slot, pid)
        # Ranks verified against no leader (or another one) are checked again against this one.
        for key in [k for k in self.ranks if k[0] == job.job_id]:
            self._untrack(key)
        self.rejected[job.job_id][:] = 0
        return {"job": job.job_id, "leader_pid": pid}

    def release(self, msg: dict[str, Any]) -> dict[str, Any]:
        job = self._job(msg)
        self._release(job, "released by request")
        return {"job": job.job_id}

    def queue_state(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._root_only(msg, "tell the launcher's queue state")
        waiting = msg.get("waiting")
        if not isinstance(waiting, bool):
            raise ProtocolError("argument 'waiting' must be true or false")
        if bool(self.table.header.queue_waiting) != waiting:
            with self.table.locked():
                self.table.set_queue_waiting(waiting)
            self.repartition()
        return {"waiting": waiting}

    def register(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Register a process that is no MPI rank of ours (the runtime registers ranks itself)."""
        job = self._job(msg)
        rank = get_int(msg, "rank", minimum=0)
        pid = get_int(msg, "pid", minimum=1)
        if rank >= job.nranks:
            raise ProtocolError(f"rank {rank} out of range for job {job.job_id} ({job.nranks} ranks)")
        if not proc.alive(pid):
            raise ProtocolError(f"no process {pid}")
        if any(t.pid == pid for t in self.ranks.values()):
            raise ProtocolError(f"process {pid} is already registered")
        why = proc.belongs_to_job(pid, job.uid, job.leader_pid)
        if why:
            raise ProtocolError(f"cannot register process {pid} in job {job.job_id}: {why}")
        seg = self.segs.get(job.job_id)
        if seg is None:
            raise ProtocolError(f"job {job.job_id} has no job segment")
        seg.write_rank(rank, pid, L.RFLAG_EXTERNAL)
        self.rejected[job.job_id][rank] = 0
        self._scan(job)
        if self.tracked[job.job_id][rank] != pid:
            raise ProtocolError(f"process {pid} could not be verified")
        return {"job": job.job_id, "rank": rank, "slot": rank}

    def forget(self, msg: dict[str, Any]) -> dict[str, Any]:
        pid = get_int(msg, "pid", minimum=1)
        for key, t in list(self.ranks.items()):
            if t.pid == pid:
                self._job({**msg, "job": key[0]})  # the requester may act on that job
                self.segs[key[0]].mark_done(t.rank, pid=t.pid)
                self._untrack(key)
                return {"pid": pid}
        raise ProtocolError(f"process {pid} is not registered")

    def suspend(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Stop every rank of the job; it holds no CPUs until resumed (the others may expand)."""
        job = self._job(msg)
        stopped = self._signal_job(job, stop=True)
        self.repartition()
        return {"job": job.job_id, "stopped": stopped}

    def resume(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Give the job CPUs again (at least its minimum; others shrink), then continue its ranks."""
        job = self._job(msg)
        if not job.suspended:
            raise ProtocolError(f"job {job.job_id} is not suspended")
        shapes = self._shapes() + [JobShape(job.job_id, job.nranks, job.max_mpl, 0)]
        plan = self._plan(shapes, f"cannot resume job {job.job_id}")
        with self.table.locked():
            self.table.set_suspended(job.slot, False)
        self._apply(plan)
        return {"job": job.job_id, "continued": self._signal_job(job, stop=False)}

    def free(self, msg: dict[str, Any]) -> dict[str, Any]:
        jobs = [j for j in self.table.jobs() if not j.suspended]
        used = sum(len(j.cpus) for j in jobs)
        minimum = sum(minimum_partition(j.nranks, j.max_mpl) for j in jobs)
        return {
            "ncpus": len(self.cpus),
            "idle": len(self.cpus) - used,  # CPUs in no partition right now
            "admissible": len(self.cpus) - minimum,  # CPUs a new job could get by shrinking others
        }

    def status(self, msg: dict[str, Any]) -> dict[str, Any]:
        h = self.table.header
        jobs = []
        for j in self.table.jobs():
            ranks = sorted((t for k, t in self.ranks.items() if k[0] == j.job_id), key=lambda t: t.rank)
            snap = self.snaps.get(j.job_id)
            seen = [snap[t.rank] if snap is not None and t.rank < len(snap) else None for t in ranks]
            jobs.append({
                "job": j.job_id, "state": j.state, "nranks": j.nranks, "max_mpl": j.max_mpl, "mpl": j.mpl,
                "cpus": list(j.cpus), "queue": L.QUEUE_NAMES.get(j.queue, "?"),
                "placement": L.PLACEMENT_NAMES.get(j.placement, "?"),
                "heuristic": L.HEURISTIC_NAMES.get(j.heuristic, "?"), "lbd": L.LBD_NAMES.get(j.lbd_phase, "?"),
                "cvcs": round(j.cvcs, 4), "ip": round(j.ip, 4), "uid": j.uid,
                "suspended": j.suspended, "registered": len(ranks), "leader_pid": j.leader_pid,
                "cpu_group": self.groups.has(j.job_id),
                "generation": j.generation, "changed_quantum": self.changed_at.get(j.job_id, 0),
                "ranks": [{"rank": t.rank, "pid": t.pid,
                           "state": L.RANK_STATE_NAMES.get(int(e["state"]), "?") if e is not None else "?",
                           "cpu": int(e["cpu"]) if e is not None else -1,
                           "ctx_switches": int(e["ctx_switches"]) if e is not None else 0,
                           "mpi_calls": int(e["mpi_calls"]) if e is not None else 0,
                           "user_time_us": t.user_time_us} for t, e in zip(ranks, seen, strict=True)],
            })  # fmt: skip
        return {
            "pid": h.manager_pid, "cpus": list(self.cpus), "quantum_ms": h.quantum_us / 1000,
            "quanta": h.heartbeat, "queue_waiting": bool(h.queue_waiting), "shm": self.table.shm_name,
            "cpu_groups": self.groups.describe(), "jobs": jobs,
        }  # fmt: skip

    # -- per-quantum reconcile -------------------------------------------------------------------
    def reconcile(self) -> None:
        """One quantum: verify new ranks, reap dead ones and finished jobs, repartition, pin, run the LBD."""
        self.quanta += 1
        with self.table.locked():
            self.table.set_heartbeat(self.quanta)
        if self.quanta in self.faults.steps:
            raise InjectedFault(f"injected fault in quantum {self.quanta}")
        # Exits, learnt from pidfds.
        ended_jobs: set[int] = set()
        for key in self.exits.exited():
            if key[0] == "leader":
                ended_jobs.add(key[1])
            else:
                self._rank_exited((key[1], key[2]))
        jobs = {j.job_id: j for j in self.table.jobs()}
        for j in jobs.values():
            self._scan(j)
        live_jobs = {t.job_id for t in self.ranks.values()}
        released = False
        for j in jobs.values():
            # Without a leader a job ends when every rank that registered is gone; a one-shot job with one
            # also once all its ranks registered and are gone (a Slurm step's ranks end before its
            # slurmstepd, which may take a while to report the step: its CPUs go to the others at once).
            seen = self.verified.get(j.job_id, 0)
            gone = seen > 0 and j.job_id not in live_jobs
            done = not j.leader_pid or (j.job_id in self.one_shot and seen >= j.nranks)
            if j.job_id in ended_jobs or (gone and done):
                self._release(j, "finished")
                released = True
        # Affinity: at once for jobs whose partition or queue changed; for the rest a slice of the
        # ranks per quantum (every rank once per repin period) in case something else changed it.
        period = self.cfg.cpumanager.repin_quanta
        phase = self.quanta % period
        if released:  # the others' partitions may have grown: read the table again (else as it was)
            jobs = {j.job_id: j for j in self.table.jobs()}
        for j in jobs.values():
            if self.pinned_gen.get(j.job_id) != j.generation:
                self._pin_job(j)
        for key, t in list(self.ranks.items()):
            if (t.rank + key[0]) % period == phase and t.job_id in jobs:
                t.pinned = ()
                self._pin(key, jobs[t.job_id])
                u = proc.user_time_us(t.pid)
                if u is not None and pidfd_alive(t.pidfd):  # read, then confirm it was still that process
                    t.user_time_us = u
        for job_id in list(self.lbd):
            if job_id in jobs:
                self._lbd(jobs[job_id])

    def _scan(self, j: JobView) -> None:
        """Read the job's rank slots (an untrusted copy) and follow what changed: verify pids not seen
        before. A slot that is done, free or names another pid no longer names its process, but the
        process stays managed until it exits."""
        seg = self.segs.get(j.job_id)
        if seg is None:
            return
        snap = seg.snapshot()
        self.snaps[j.job_id] = snap
        tracked, rejected = self.tracked[j.job_id], self.rejected[j.job_id]
        pids = np.zeros(len(tracked), dtype=np.int64)
        n = min(len(snap), len(tracked))
        states = snap["state"][:n]
        active = (states == L.RANK_RUNNING) | (states == L.RANK_WAITING)
        pids[:n] = np.where(active, snap["pid"][:n], 0)
        tracked[(tracked != 0) & (pids != tracked)] = 0
        new = np.flatnonzero((pids > 0) & (pids != tracked) & (pids != rejected))
        for r in new[:MAX_CHECKS_PER_QUANTUM].tolist():  # the rest next quantum
            self._track(j, r, int(pids[r]))

    def _rank_exited(self, key: RankKey) -> None:
        """A verified rank exited (or is a zombie): mark its slot done, so that its siblings reclaim a
        token it held at once (a zombie still answers kill(pid, 0), the runtime's own death test)."""
        t = self.ranks.get(key)
        seg = self.segs.get(key[0])
        if t is not None and seg is not None:
            seg.mark_done(t.rank, pid=t.pid)
        self._untrack(key)

    def _lbd(self, j: JobView) -> None:
        tracked, snap = self.tracked.get(j.job_id), self.snaps.get(j.job_id)
        slots = np.flatnonzero(tracked).tolist() if tracked is not None else []
        if not slots or snap is None:
            return
        keys = [(j.job_id, int(tracked[r])) for r in slots]
        state = self.lbd[j.job_id]
        user = None
        if state.wants_user_times(self.lbd_params):
            times = []
            for k in keys:
                t = proc.cpu_time_us(self.ranks[k].pid)
                times.append(t if self.exits.alive(_wkey(k)) else None)
            user = None if None in times else [t / 1e6 for t in times]  # type: ignore[operator]
        idle = self._partition_idle(j) if user is not None else None
        now = self.idle_now[1] if user is not None else None  # when those idle times were read
        # Each rank's calls and switches on local queues, every rank tracked (module lbd: "A stalled CPU moves the
        # placement": the ranks' places are their slots).
        by_rank = (state.phase == L.LBD_DECIDED and bool(state.local) and user is not None
                   and slots == list(range(j.nranks)) and j.nranks <= len(snap))  # fmt: skip
        switches = [int(snap["ctx_switches"][r]) if r < len(snap) else 0 for r in slots] \
            if state.phase == L.LBD_MEASURING or state.quick or by_rank else []  # fmt: skip
        live = [r for r in slots if r < len(snap)]
        calls = float(snap["mpi_calls"][live].sum()) if state.phase != L.LBD_MEASURING else None
        rank_calls = [float(snap["mpi_calls"][r]) for r in slots] if by_rank else None
        new = lbd_step(state, switches, user, self.lbd_params, calls, ncpus=len(j.cpus), idle=idle, now=now,
                       rank_calls=rank_calls)  # fmt: skip
        self.lbd[j.job_id] = new
        shown = (new.phase, new.cvcs, new.ip, new.queue_local, new.rate_local, new.decisions, new.wall_decided,
                 new.block, new.block_quanta, new.rebase)  # fmt: skip
        if shown == (state.phase, state.cvcs, state.ip, state.queue_local, state.rate_local, state.decisions,
                     state.wall_decided, state.block, state.block_quanta, state.rebase):  # fmt: skip
            return
        with self.table.locked():
            self.table.set_lbd(j.slot, new.phase, new.cvcs or 0.0, new.ip)
            if new.decisions:  # until the first decision the job stays on the global queue it started on
                self.table.set_queue(j.slot, L.QUEUE_LOCAL if new.queue_local else L.QUEUE_GLOBAL)
                self.table.set_placement(j.slot, _placement(new))
        if new.decisions > state.decisions:
            event(log, "lbd_decision", job=j.job_id, cvcs=round(new.cvcs or 0, 4), ip=round(new.ip or 0, 4),
                  queue="local" if new.local else "global", decision=new.decisions,
                  why="global_faster" if new.global_faster else "one_cpu" if new.one_cpu else "few_calls" if new.unread
                  else "sparse_calls" if new.sparse
                  else "local_slower" if not new.local and new.rate_local is not None
                  else "reverse_trial" if new.reverse else "band_trial" if new.band else "idleness",
                  calls_per_cpu_s_global=round(new.rate_global or 0, 1),
                  calls_per_cpu_s_local=round(new.rate_local or 0, 1), calls_per_s_global=round(new.wall_global or 0),
                  calls_per_s_local=round(new.wall_local or 0), calls_per_cpu_s_decided=round(new.rate_decided or 0, 1),
                  calls_per_s_decided=round(new.wall_decided or 0), quick=state.quick)  # fmt: skip
        elif new.quick_read and not state.quick_read:
            # A busy job's quick window read it imbalanced, or held too few calls: it measures on (module lbd: "Quick
            # window"); ip 0 where there was no reading.
            event(log, "lbd_quick_window", job=j.job_id, ip=round(new.ip or 0, 4), read=new.ip is not None)
        elif new.one_cpu and state.one_cpu and new.block_quanta == 1 and not state.block_quanta:
            # A job on one CPU tried again (module lbd: "Queue trial on one CPU"): its pace fell, or periodically.
            event(log, "lbd_remeasure", job=j.job_id, quanta=state.since_decision + 1,
                  why="progress_fell" if new.fell else "periodic", one_cpu=True)  # fmt: skip
        elif state.rebase and new.block != state.block:
            # The first read after that move found the job slower than it was stalled: the move undone (module lbd:
            # "A move that reads slower is undone").
            pace = watched_rates(state, new.watch[0], new.watch[1], new.watch[3]) if new.watch else None
            event(log, "lbd_placement", job=j.job_id, placement=L.PLACEMENT_NAMES[_placement(new)], why="moved_slower",
                  calls_per_s=round(pace[0]) if pace else 0,
                  calls_per_s_stalled=round(state.stall_pace[0]) if state.stall_pace else 0)  # fmt: skip
        elif new.moved and new.block != state.block:
            # The placement changed by the watch: the CPUs whose ranks made no calls, handing the CPU to each other
            # in their waits, at two reads in a row (module lbd: "A stalled CPU moves the placement").
            stalled = stalled_cpus(state.watch_ranks, new.watch_ranks, len(j.cpus), state.block)
            event(log, "lbd_placement", job=j.job_id, placement=L.PLACEMENT_NAMES[_placement(new)], why="stalled_cpu",
                  stalled=",".join(str(j.cpus[c]) for c in stalled), calls_per_s_cyclic=round(new.wall_cyclic or 0),
                  calls_per_s_block=round(new.wall_block or 0),
                  calls_per_s_stalled=round(new.stall_pace[0]) if new.stall_pace else 0)  # fmt: skip
        elif state.rebase and not new.rebase and new.phase == L.LBD_DECIDED:
            # The first watch read after that move: the pace the job is watched at from now on (module lbd: "A
            # stalled CPU moves the placement").
            event(log, "lbd_watch_pace", job=j.job_id, placement=L.PLACEMENT_NAMES[_placement(new)],
                  calls_per_s=round(new.wall_local or 0), calls_per_s_trial=round(state.wall_local or 0),
                  calls_per_cpu_s=round(new.rate_local or 0, 1))  # fmt: skip
        elif state.block_quanta and not new.block_quanta and new.one_cpu:
            # A queue trial that kept the queue of the last decision (module lbd: "Queue trial on one CPU"): each
            # queue's pace over its segments. (One that changed it is a decision, logged above with them.)
            event(log, "lbd_trial", job=j.job_id, queue="global", kept=not new.local, one_cpu=True,
                  calls_per_s_local=round(new.wall_local or 0), calls_per_s_decided=round(new.wall_decided or 0),
                  segments=new.block_segs, rounds_lost=new.rounds_lost)  # fmt: skip
        elif state.block_quanta and not new.block_quanta:
            # The placement decided (module lbd: "Placement trial"): each placement's pace over its segments,
            # the local trial's in r mod P before them, and the rounds in which block did not lead.
            event(log, "lbd_trial", job=j.job_id, queue="local", placement="block", kept=new.block,
                  calls_per_s_cyclic=round(new.wall_cyclic or 0), calls_per_s_block=round(new.wall_block or 0),
                  calls_per_s_first=round(state.wall_local or 0), segments=new.block_segs,
                  rounds_lost=new.rounds_lost)  # fmt: skip
        elif new.rate_local is not None and new.rate_local != state.rate_local:
            event(log, "lbd_trial", job=j.job_id, queue="local", kept=True,
                  calls_per_cpu_s_global=round(new.rate_global or 0, 1),
                  calls_per_cpu_s_local=round(new.rate_local, 1), calls_per_s_global=round(new.wall_global or 0),
                  calls_per_s_local=round(new.wall_local or 0))  # fmt: skip
        elif new.wall_decided != state.wall_decided:  # a global trial that local queues won
            # `quanta`: how long it ran, short of its length only where it fell clearly behind (lbd.py)
            event(log, "lbd_trial", job=j.job_id, queue="global", kept=False,
                  calls_per_cpu_s_local=round(new.rate_local or 0, 1),
                  calls_per_cpu_s_decided=round(new.rate_decided or 0, 1), calls_per_s_local=round(new.wall_local or 0),
                  calls_per_s_decided=round(new.wall_decided or 0), quanta=state.global_quanta)  # fmt: skip
        elif new.phase == L.LBD_STABLE and state.phase == L.LBD_DECIDED:
            # A fall: the rates its watch read, against its local trial's (module lbd: "Watching a local job").
            read = watched_rates(state, calls, now, job_cpu_now(user, idle)) if new.fell else None  # type: ignore[arg-type]
            rates = {} if read is None else {
                "calls_per_s": round(read[0]), "calls_per_s_local": round(new.wall_local or 0),
                "calls_per_cpu_s": round(read[1] or 0, 1), "calls_per_cpu_s_local": round(new.rate_local or 0, 1),
            }  # fmt: skip
            event(log, "lbd_remeasure", job=j.job_id, quanta=state.since_decision + 1,
                  why="progress_fell" if new.fell else "periodic", **rates)  # fmt: skip
        elif new.phase == L.LBD_DECIDED and new.ip != state.ip:  # a re-check window of a global job closed
            event(log, "lbd_recheck", job=j.job_id, ip=round(new.ip or 0, 4), against=new.against)

    def _partition_idle(self, j: JobView) -> float | None:
        """The idle seconds of the job's CPUs while it held them, summed since the first read: a
        repartition between two reads leaves that stretch out (its CPUs were others'). None if
        /proc/stat lacks one of them."""
        if self.idle_now[0] != self.quanta:
            self.idle_now = (self.quanta, time.monotonic(), proc.cpu_idle_s())
        _, at, now = self.idle_now
        if not j.cpus or any(c not in now for c in j.cpus):
            self.idle_seen.pop(j.job_id, None)
            return None
        reads = tuple(now[c] for c in j.cpus)
        cpus, before, then, total = self.idle_seen.get(j.job_id, (j.cpus, reads, at, 0.0))
        if cpus == j.cpus:  # no more than the CPUs' time (the counters are ticks, and a CPU's may lag)
            idle = sum(max(0.0, a - b) for a, b in zip(reads, before, strict=True))
            total += min(idle, (at - then + 0.02) * len(cpus))
        self.idle_seen[j.job_id] = (j.cpus, reads, at, total)
        return total

    # -- helpers ---------------------------------------------------------------------------------
    def _shapes(self) -> list[JobShape]:
        """The jobs that hold CPUs: all admitted ones except the suspended."""
        return [JobShape(j.job_id, j.nranks, j.max_mpl, len(j.cpus)) for j in self.table.jobs() if not j.suspended]

    def _current(self) -> dict[int, tuple[int, ...]]:
        return {j.job_id: j.cpus for j in self.table.jobs()}

    def _plan(self, shapes: list[JobShape], what: str) -> dict[int, tuple[int, ...]]:
        try:
            return plan_partitions(shapes, self._current(), self.cpus, not self.table.header.queue_waiting)
        except AdmissionError as e:
            raise ProtocolError(f"{what}: {e}") from None

    def repartition(self) -> None:
        self._apply(plan_partitions(self._shapes(), self._current(), self.cpus,
                                    queue_empty=not self.table.header.queue_waiting))  # fmt: skip

    def _apply(self, plan: dict[int, tuple[int, ...]]) -> None:
        changed = []
        with self.table.locked():
            for j in self.table.jobs():
                cpus = () if j.suspended else plan.get(j.job_id)
                if cpus is not None and self.table.set_partition(j.slot, cpus):
                    changed.append(j.job_id)
        self.repartitions += len(changed)
        for j in self.table.jobs():
            if j.job_id in changed:
                self.changed_at[j.job_id] = self.quanta
                event(log, "partition", job=j.job_id, cpus=j.cpus, mpl=j.mpl)
                self._pin_job(j)  # at once rather than at the next quantum
                self._wake_job(j)

    def _track(self, j: JobView, rank: int, pid: int) -> None:
        """Start managing `pid` as rank `rank` of job `j` if it belongs to the job; else note the refusal.
        Order matters: the pidfd is opened first, the process checked, then the pidfd confirms that the
        checked process is still the one it refers to (a pid reused meanwhile fails that test)."""
        key = (j.job_id, pid)
        t = self.ranks.get(key)
        if t is not None:  # verified already (its slot went away and came back): nothing to check
            self.tracked[j.job_id][rank], t.rank = pid, rank
            return
        why = None
        if not self.exits.watch(_wkey(key), pid):
            why = "no such process"
        else:
            why = proc.belongs_to_job(pid, j.uid, j.leader_pid)
            if why is None and not self.exits.alive(_wkey(key)):
                why = "it exited"
            if why is None and j.leader_pid and not self.exits.alive(("leader", j.job_id)):
                why = f"the job's leader {j.leader_pid} is gone"
        if why is not None:
            self.exits.unwatch(_wkey(key))
            self.rejected[j.job_id][rank] = pid
            n = self.refusals[j.job_id] = self.refusals.get(j.job_id, 0) + 1
            if n <= MAX_LOGGED_REFUSALS:
                log.warning(
                    "job %d rank %d: ignoring pid %d named in its job segment: %s%s",
                    j.job_id,
                    rank,
                    pid,
                    why,
                    "; further refusals for this job are not logged" if n == MAX_LOGGED_REFUSALS else "",
                )
            return
        self.ranks[key] = _Rank(pid, j.job_id, rank, self.exits.pidfd(_wkey(key)) or -1)
        # Its MPICH segment, to remove if the job is killed: from its maps where this manager may read
        # them (root, or CAP_SYS_PTRACE), else as its runtime reported it (removed only if the job's user
        # owns it, see _release).
        segs = self.mpi_segs.setdefault(j.job_id, set())
        segs.update(mapped_segments(pid, MPICH_PREFIX))
        snap = self.snaps.get(j.job_id)
        reported = reported_segment(bytes(snap["mpich_shm"][rank])) if snap is not None and rank < len(snap) else None
        if reported:
            segs.add(reported)
        self.tracked[j.job_id][rank] = pid
        self.verified[j.job_id] += 1
        with self.table.locked():
            self.table.set_registered(j.slot, self.verified[j.job_id])
        if j.suspended and self.exits.send_signal(_wkey(key), signal.SIGSTOP):
            self.ranks[key].stopped = True  # a rank that appears in a suspended job stops too
        self._pin(key, j)
        if pidfd_alive(self.ranks[key].pidfd):  # still the verified process
            self.groups.place(j.job_id, pid)

    def _untrack(self, key: RankKey) -> None:
        t = self.ranks.pop(key, None)
        if t is not None and t.stopped:
            self.exits.send_signal(_wkey(key), signal.SIGCONT)  # never leave a process stopped
        self.exits.unwatch(_wkey(key))
        tracked = self.tracked.get(key[0])
        if t is not None and tracked is not None and tracked[t.rank] == t.pid:
            tracked[t.rank] = 0

    def _pin_job(self, j: JobView) -> None:
        for key in [k for k in self.ranks if k[0] == j.job_id]:
            self._pin(key, j)
        self.pinned_gen[j.job_id] = j.generation

    def _pin(self, key: RankKey, j: JobView) -> None:
        t = self.ranks[key]
        # At MPL 1 every rank has a CPU of its own, whatever the queue type: pin it there, so that two
        # spinning ranks never share a CPU while another one idles.
        own = j.queue == L.QUEUE_LOCAL or len(j.cpus) >= j.nranks
        target = rank_cpus(t.rank, j.cpus, local_queues=own, nranks=j.nranks, placement=j.placement)
        # The pidfd's check right before the calls: the pid still names the verified process.
        if not target or t.pinned == target or not pidfd_alive(t.pidfd):
            return
        # On a global queue the runtime pins a rank it gives a token to onto that token's CPU: a pin
        # within the partition is kept (re-pinning to the whole of it would let the kernel queue the
        # rank behind another one while a CPU idles).
        if (not own and proc.affinity_within(t.pid, target)) or proc.set_affinity(t.pid, target):
            t.pinned = target

    def _wake_job(self, job: JobView) -> None:
        """Wake the job's blocked, verified ranks so they see a new partition now (futex words in its
        segment; the others notice within the runtime's WAKE_MS)."""
        seg, snap, tracked = self.segs.get(job.job_id), self.snaps.get(job.job_id), self.tracked.get(job.job_id)
        if seg is None or snap is None or tracked is None:
            return
        for r in np.flatnonzero(tracked).tolist():
            if r < len(snap) and snap["state"][r] == L.RANK_WAITING:
                seg.wake(r)

    def _release(self, j: JobView, why: str) -> None:
        self._signal_job(j, stop=False)
        with self.table.locked():
            self.table.remove_job(j.slot)
        snap = self.snaps.get(j.job_id)
        if snap is not None:  # its hand-offs stay counted after it is gone (a Prometheus counter)
            self.handoffs_retired += int(snap["ctx_switches"].sum())
        for key in [k for k in self.ranks if k[0] == j.job_id]:
            self._untrack(key)
        seg = self.segs.pop(j.job_id, None)
        if seg is not None:
            seg.unlink()  # the ranks keep their mapping; the name goes
            seg.close()
        for path in sorted(self.mpi_segs.pop(j.job_id, ())):
            remove_owned(path, j.uid)
        self.groups.remove(j.job_id)
        for d in (self.snaps, self.tracked, self.rejected, self.verified, self.refusals, self.lbd, self.pinned_gen,
                  self.idle_seen):  # fmt: skip
            d.pop(j.job_id, None)
        self.one_shot.discard(j.job_id)
        self.exits.unwatch(("leader", j.job_id))
        event(log, "release", job=j.job_id, reason=why, cpus=j.cpus)
        self.repartition()

    def _signal_job(self, j: JobView, stop: bool) -> int:
        """SIGSTOP or SIGCONT the job's verified ranks, through their pidfds."""
        n = 0
        for key, t in self.ranks.items():
            if key[0] != j.job_id:
                continue
            if stop and not t.stopped and self.exits.send_signal(_wkey(key), signal.SIGSTOP):
                t.stopped = True
                n += 1
            elif not stop and t.stopped:
                self.exits.send_signal(_wkey(key), signal.SIGCONT)
                t.stopped = False
                n += 1
        with self.table.locked():
            if self.table.seg.jobs[j.slot].job_id == j.job_id:
                self.table.set_suspended(j.slot, stop)
        return n

    def token_handoffs(self) -> int:
        """Token hand-offs on this node so far: the live ranks' counters plus those of ranks gone."""
        live = sum(int(snap["ctx_switches"].sum()) for snap in self.snaps.values())
        return self.handoffs_retired + live

    def shutdown(self) -> None:
        """Leave nothing stopped or blocked: continue every stopped rank, wake every waiter, remove
        the job segments (the ranks keep their mappings and go on as plain MPI)."""
        with self.table.locked():
            self.table.set_shutdown()
        for key, t in self.ranks.items():
            if t.stopped:
                self.exits.send_signal(_wkey(key), signal.SIGCONT)
                t.stopped = False
        for seg in self.segs.values():
            for r in range(seg.nranks):
                seg.release_waiter(r)
            seg.unlink()
            seg.close()
        self.segs.clear()
        self.groups.close()
        self.exits.close()


def open_table(cfg: Config, cpus: tuple[int, ...]) -> tuple[SharedTable, bool]:
    """Attach to a table left by a dead manager (recovery) or create a new one."""
    try:
        t = SharedTable.attach(cfg.shm_name, cfg.lock_name)
    except TableError as e:
        if isinstance(e, ForeignTable):  # planted by a user while no manager ran: never adopt it
            log.warning("%s: removing it", e)
            remove_table(cfg.shm_name, cfg.lock_name)
        quantum_us = int(cfg.cpumanager.quantum_ms * 1000)
        return SharedTable.create(cfg.shm_name, cfg.lock_name, cpus, quantum_us), False
    pid = t.header.manager_pid
    if pid and pid != os.getpid() and proc.alive(pid) and "cpumanager" in " ".join(proc.cmdline(pid)):
        t.close()
        raise TableError(f"a CPU manager (pid {pid}) already runs on {cfg.shm_name}")
    if t.managed_cpus() != cpus:
        log.warning("recovered table manages CPUs %s; keeping them (asked for %s)", t.managed_cpus(), cpus)
    return t, True
