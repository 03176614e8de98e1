"""The CPU manager's state and actions: request handlers and the per-quantum reconcile.

It reads the shared table, calls the pure functions (`partition`, `lbd`) and applies their results
(table writes, affinity, signals). The daemon module only wires it to a socket and a clock.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

from vmsched.config import Config
from vmsched.cpumanager import processes as proc
from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.lbd import LbdParams, LbdState, lbd_step
from vmsched.cpumanager.partition import AdmissionError, JobShape, minimum_partition, plan_partitions, rank_cpus
from vmsched.cpumanager.table import JobView, SharedTable, TableError, TableFull
from vmsched.logs import event
from vmsched.proctrack import ExitWatcher
from vmsched.protocol import ProtocolError, get_int, get_str

log = logging.getLogger("vm-cpumanager")

QUEUE_MODES = ("lbd", "local", "global")
HEURISTICS = {name: code for code, name in L.HEURISTIC_NAMES.items()}
MAX_JOB_ID = 2**31 - 1
MAX_RANKS_PER_JOB = 1024


@dataclass
class _Rank:
    """What the manager remembers about a registered rank outside the shared table."""

    pid: int
    job_id: int
    pinned: tuple[int, ...] = ()


class CpuManager:
    def __init__(self, cfg: Config, table: SharedTable, recovered: bool) -> None:
        self.cfg = cfg
        self.table = table
        self.cpus = table.managed_cpus()
        cm = cfg.cpumanager
        self.lbd_params = LbdParams(cm.lbd_threshold, cm.lbd_stable_change, cm.lbd_stable_quanta, cm.lbd_ip_quanta)
        self.lbd: dict[int, LbdState] = {}
        self.ranks: dict[int, _Rank] = {}  # by rank slot
        self.pinned_gen: dict[int, int] = {}  # job id -> generation its ranks were last pinned for
        self.changed_at: dict[int, int] = {}  # job id -> quantum of its last partition change
        self.exits = ExitWatcher()
        self.quanta = 0
        self.repartitions = 0  # partition changes, one per job per change (a metric)
        self.handoffs_retired = 0  # token hand-offs of ranks whose slots were freed (a metric)
        if recovered:
            self._recover()

    # -- startup ---------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Take over a table left by a manager that died: keep jobs, partitions and pins as found."""
        for j in self.table.jobs():
            if j.lbd_phase in (L.LBD_MEASURING, L.LBD_STABLE):
                self.lbd[j.job_id] = LbdState()  # measurement restarts; decided jobs keep their queue
            if j.leader_pid and not self.exits.watch(("leader", j.job_id), j.leader_pid):
                event(log, "leader_gone", job=j.job_id, pid=j.leader_pid, reason="ended while no manager ran")
        self.table.header.manager_pid = os.getpid()
        event(log, "recover", jobs=len(self.table.jobs()), ranks=len(self.table.rank_slots()))

    # -- request handlers ------------------------------------------------------------------------
    def handlers(self) -> dict[str, Any]:
        return {
            "admit": self.admit, "release": self.release, "queue_state": self.queue_state,
            "status": self.status, "free": self.free, "register": self.register, "forget": self.forget,
            "suspend": self.suspend, "resume": self.resume, "set_mpl": self.set_mpl,
            "set_leader": self.set_leader, "ping": lambda m: {"pid": self.table.header.manager_pid},
        }  # fmt: skip

    def _job(self, msg: dict[str, Any]) -> JobView:
        job_id = get_int(msg, "job", minimum=1)
        for j in self.table.jobs():
            if j.job_id == job_id:
                return j
        raise ProtocolError(f"unknown job {job_id}")

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
        mode = get_str(msg, "queue", QUEUE_MODES, self.cfg.cpumanager.default_queue)
        heuristic = get_str(msg, "heuristic", tuple(HEURISTICS), L.DEFAULT_HEURISTIC)
        if self.table.job_slot(job_id) is not None:
            raise ProtocolError(f"job {job_id} is already admitted")
        if leader and not proc.alive(leader):
            raise ProtocolError(f"no process {leader} (leader_pid)")
        shapes = self._shapes() + [JobShape(job_id, nranks, max_mpl, 0)]
        plan = self._plan(shapes, f"cannot admit job {job_id} (needs {minimum_partition(nranks, max_mpl)} CPUs)")
        queue = L.QUEUE_LOCAL if mode == "local" else L.QUEUE_GLOBAL
        with self.table.locked():
            try:
                slot = self.table.add_job(
                    job_id, nranks, max_mpl, queue, HEURISTICS[heuristic], spin_us, leader, lbd=mode == "lbd"
                )
            except TableFull as e:
                raise ProtocolError(str(e)) from None
        if mode == "lbd":
            self.lbd[job_id] = LbdState()
        if leader:
            self.exits.watch(("leader", job_id), leader)
        self._apply(plan)
        event(log, "admit", job=job_id, ranks=nranks, max_mpl=max_mpl, queue=mode, cpus=plan[job_id])
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
        self.table.seg.jobs[job.slot].max_mpl = max_mpl
        self._apply(plan)
        event(log, "set_mpl", job=job.job_id, max_mpl=max_mpl, was=job.max_mpl, cpus=plan[job.job_id])
        return {"job": job.job_id, "max_mpl": max_mpl, "cpus": list(plan[job.job_id])}

    def set_leader(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Name the process (e.g. mpiexec) whose exit ends the job."""
        job = self._job(msg)
        pid = get_int(msg, "pid", minimum=1)
        if not self.exits.watch(("leader", job.job_id), pid):
            raise ProtocolError(f"no process {pid}")
        self.table.seg.jobs[job.slot].leader_pid = pid
        return {"job": job.job_id, "leader_pid": pid}

    def release(self, msg: dict[str, Any]) -> dict[str, Any]:
        job = self._job(msg)
        self._release(job, "released by request")
        return {"job": job.job_id}

    def queue_state(self, msg: dict[str, Any]) -> dict[str, Any]:
        waiting = msg.get("waiting")
        if not isinstance(waiting, bool):
            raise ProtocolError("argument 'waiting' must be true or false")
        if bool(self.table.header.queue_waiting) != waiting:
            self.table.header.queue_waiting = int(waiting)
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
        with self.table.locked():
            try:
                slot = self.table.add_rank(job.slot, rank, pid, L.RFLAG_EXTERNAL)
            except TableFull as e:
                raise ProtocolError(str(e)) from None
        self._track(slot)
        return {"job": job.job_id, "rank": rank, "slot": slot}

    def forget(self, msg: dict[str, Any]) -> dict[str, Any]:
        pid = get_int(msg, "pid", minimum=1)
        for slot, t in list(self.ranks.items()):
            if t.pid == pid:
                self._drop_rank(slot)
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
        self.table.seg.jobs[job.slot].suspended = 0
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
            ranks = self.table.ranks(j.job_id)
            jobs.append({
                "job": j.job_id, "state": j.state, "nranks": j.nranks, "max_mpl": j.max_mpl, "mpl": j.mpl,
                "cpus": list(j.cpus), "queue": L.QUEUE_NAMES[j.queue], "heuristic": L.HEURISTIC_NAMES[j.heuristic],
                "lbd": L.LBD_NAMES[j.lbd_phase], "cvcs": round(j.cvcs, 4), "ip": round(j.ip, 4),
                "suspended": j.suspended, "registered": len(ranks), "leader_pid": j.leader_pid,
                "generation": j.generation, "changed_quantum": self.changed_at.get(j.job_id, 0),
                "ranks": [{"rank": r.rank, "pid": r.pid, "state": L.RANK_STATE_NAMES.get(r.state, "?"),
                           "cpu": r.cpu, "ctx_switches": r.ctx_switches, "mpi_calls": r.mpi_calls,
                           "user_time_us": r.user_time_us} for r in ranks],
            })  # fmt: skip
        return {
            "pid": h.manager_pid, "cpus": list(self.cpus), "quantum_ms": h.quantum_us / 1000,
            "quanta": h.heartbeat, "queue_waiting": bool(h.queue_waiting), "shm": self.table.shm_name,
            "jobs": jobs,
        }  # fmt: skip

    # -- per-quantum reconcile -------------------------------------------------------------------
    def reconcile(self) -> None:
        """One quantum: reap dead ranks and finished jobs, repartition, pin, run the LBD."""
        self.quanta += 1
        self.table.header.heartbeat = self.quanta
        seg_ranks = self.table.seg.ranks
        active = set(self.table.rank_slots())
        # Ranks the runtime registered or unregistered (or a new process in a reused slot).
        for slot in active:
            t = self.ranks.get(slot)
            if t is None or t.pid != seg_ranks[slot].pid:
                self._track(slot)
        for slot in [s for s in self.ranks if s not in active]:
            self._untrack(slot)
        # Exits, learnt from pidfds.
        ended_jobs: set[int] = set()
        for key in self.exits.exited():
            if isinstance(key, tuple):
                ended_jobs.add(key[1])
            else:
                self._drop_rank(key)
        for slot in [s for s in self.ranks if seg_ranks[s].state == L.RANK_DONE]:
            self._drop_rank(slot)
        live_jobs = {t.job_id for t in self.ranks.values()}
        for j in self.table.jobs():
            # Without a leader a job ends when every rank that registered is gone.
            if j.job_id in ended_jobs or (not j.leader_pid and j.registered > 0 and j.job_id not in live_jobs):
                self._release(j, "finished")
        # Affinity: at once for jobs whose partition or queue changed; for the rest a slice of the
        # ranks per quantum (every rank once per repin period) in case something else changed it.
        period = self.cfg.cpumanager.repin_quanta
        phase = self.quanta % period
        jobs = {j.job_id: j for j in self.table.jobs()}
        for j in jobs.values():
            if self.pinned_gen.get(j.job_id) != j.generation:
                self._pin_job(j)
        for slot, t in self.ranks.items():
            if slot % period == phase and t.job_id in jobs:
                t.pinned = ()
                self._pin(slot, jobs[t.job_id])
                u = proc.user_time_us(t.pid)
                if u is not None:
                    seg_ranks[slot].user_time_us = u
        for job_id in list(self.lbd):
            if job_id in jobs:
                self._lbd(jobs[job_id])

    def _lbd(self, j: JobView) -> None:
        slots = sorted(self.table.rank_slots(j.job_id), key=lambda s: self.table.seg.ranks[s].rank)
        if not slots:
            return
        state = self.lbd[j.job_id]
        user = None
        if state.wants_user_times(self.lbd_params):
            times = [proc.cpu_time_us(self.ranks[s].pid) if s in self.ranks else None for s in slots]
            user = None if None in times else [t / 1e6 for t in times]  # type: ignore[operator]
        switches = self.table.rank_cols["ctx_switches"][slots].tolist()
        new = lbd_step(state, switches, user, self.lbd_params)
        self.lbd[j.job_id] = new
        e = self.table.seg.jobs[j.slot]
        e.lbd_phase, e.cvcs = new.phase, new.cvcs or 0.0
        if new.phase == L.LBD_DECIDED:
            e.ip = new.ip or 0.0
            del self.lbd[j.job_id]
            with self.table.locked():
                self.table.set_queue(j.slot, L.QUEUE_LOCAL if new.local else L.QUEUE_GLOBAL)
            event(log, "lbd_decision", job=j.job_id, cvcs=round(new.cvcs or 0, 4), ip=round(new.ip or 0, 4),
                  queue="local" if new.local else "global")  # fmt: skip

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

    def _track(self, slot: int) -> None:
        e = self.table.seg.ranks[slot]
        self._untrack(slot)
        self.ranks[slot] = _Rank(e.pid, e.job_id)
        if not self.exits.watch(slot, e.pid):
            self._drop_rank(slot)
            return
        j = next((j for j in self.table.jobs() if j.job_id == e.job_id), None)
        if j is not None:
            self._pin(slot, j)

    def _untrack(self, slot: int) -> None:
        self.ranks.pop(slot, None)
        self.exits.unwatch(slot)

    def _pin_job(self, j: JobView) -> None:
        for slot, t in self.ranks.items():
            if t.job_id == j.job_id:
                self._pin(slot, j)
        self.pinned_gen[j.job_id] = j.generation

    def _pin(self, slot: int, j: JobView) -> None:
        t = self.ranks[slot]
        # At MPL 1 every rank has a CPU of its own, whatever the queue type: pin it there, so that two
        # spinning ranks never share a CPU while another one idles.
        own = j.queue == L.QUEUE_LOCAL or len(j.cpus) >= j.nranks
        target = rank_cpus(self.table.seg.ranks[slot].rank, j.cpus, local_queues=own)
        if target and t.pinned != target and proc.set_affinity(t.pid, target):
            t.pinned = target

    def _wake_job(self, job: JobView) -> None:
        """Wake the job's blocked ranks so they see a new partition now (futex words in the table)."""
        off = L.RankEntry.wake.offset
        for slot in self.table.rank_slots(job.job_id):
            if self.table.seg.ranks[slot].state == L.RANK_WAITING:
                proc.futex_wake(ctypes.addressof(self.table.seg.ranks[slot]) + off)

    def _drop_rank(self, slot: int) -> None:
        e = self.table.seg.ranks[slot]
        if e.flags & L.RFLAG_STOPPED and slot in self.ranks:
            proc.send_signal(self.ranks[slot].pid, signal.SIGCONT)
        with self.table.locked():
            if e.state != L.RANK_FREE:
                self.handoffs_retired += e.ctx_switches
                self.table.free_rank(slot)
        self._untrack(slot)

    def _release(self, j: JobView, why: str) -> None:
        self._signal_job(j, stop=False)
        with self.table.locked():
            self.handoffs_retired += int(self.table.rank_cols["ctx_switches"][self.table.rank_slots(j.job_id)].sum())
            self.table.remove_job(j.slot)
        for slot in [s for s, t in self.ranks.items() if t.job_id == j.job_id]:
            self._untrack(slot)
        self.exits.unwatch(("leader", j.job_id))
        self.lbd.pop(j.job_id, None)
        self.pinned_gen.pop(j.job_id, None)
        event(log, "release", job=j.job_id, reason=why, cpus=j.cpus)
        self.repartition()

    def _signal_job(self, j: JobView, stop: bool) -> int:
        n = 0
        for slot in self.table.rank_slots(j.job_id):
            e = self.table.seg.ranks[slot]
            if stop and proc.send_signal(e.pid, signal.SIGSTOP):
                e.flags |= L.RFLAG_STOPPED
                n += 1
            elif not stop and e.flags & L.RFLAG_STOPPED:
                proc.send_signal(e.pid, signal.SIGCONT)
                e.flags &= ~L.RFLAG_STOPPED
                n += 1
        self.table.seg.jobs[j.slot].suspended = int(stop)
        return n

    def token_handoffs(self) -> int:
        """Token hand-offs on this node so far: the live ranks' counters plus those of ranks gone."""
        live = self.table.rank_cols["ctx_switches"][self.table.rank_slots()].sum()
        return self.handoffs_retired + int(live)

    def shutdown(self) -> None:
        """Leave nothing stopped or blocked: continue every stopped rank, wake every waiter."""
        self.table.header.shutdown = 1
        off = L.RankEntry.wake.offset
        for slot in self.table.rank_slots():
            e = self.table.seg.ranks[slot]
            if e.flags & L.RFLAG_STOPPED:
                proc.send_signal(e.pid, signal.SIGCONT)
                e.flags &= ~L.RFLAG_STOPPED
            e.wake = 1
            proc.futex_wake(ctypes.addressof(e) + off)
        self.exits.close()


def open_table(cfg: Config, cpus: tuple[int, ...]) -> tuple[SharedTable, bool]:
    """Attach to a table left by a dead manager (recovery) or create a new one."""
    try:
        t = SharedTable.attach(cfg.shm_name, cfg.lock_name)
    except TableError:
        quantum_us = int(cfg.cpumanager.quantum_ms * 1000)
        return SharedTable.create(cfg.shm_name, cfg.lock_name, cpus, quantum_us), False
    pid = t.header.manager_pid
    if pid and pid != os.getpid() and proc.alive(pid) and "cpumanager" in " ".join(proc.cmdline(pid)):
        t.close()
        raise TableError(f"a CPU manager (pid {pid}) already runs on {cfg.shm_name}")
    if t.managed_cpus() != cpus:
        log.warning("recovered table manages CPUs %s; keeping them (asked for %s)", t.managed_cpus(), cpus)
    return t, True
