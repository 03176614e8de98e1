"""Access to the partition table in POSIX shared memory: create, attach, lock, read, write.

Readers get plain frozen snapshots (`JobView`, `RankView`); all writes go through the few methods
here, under the table's POSIX semaphore.
"""

from __future__ import annotations

import ctypes as C
import mmap
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import posix_ipc

from vmsched.cpumanager import shm_layout as L

LOCK_TIMEOUT_S = 1.0


class TableError(RuntimeError):
    """The table cannot be created, attached or updated; the message says why."""


class TableFull(TableError):
    """A fixed capacity of the layout is exhausted."""


@dataclass(frozen=True)
class JobView:
    slot: int
    job_id: int
    state: int
    nranks: int
    max_mpl: int
    mpl: int
    queue: int
    heuristic: int
    spin_us: int
    generation: int
    cpus: tuple[int, ...]
    leader_pid: int
    registered: int
    suspended: bool
    lbd_phase: int
    admit_time: float
    cvcs: float
    ip: float


@dataclass(frozen=True)
class RankView:
    slot: int
    job_id: int
    rank: int
    pid: int
    state: int
    flags: int
    cpu: int
    ctx_switches: int
    sent_not_consumed: int
    unconsumed: int
    user_time_us: int
    mpi_calls: int
    blocking_calls: int


def _job_view(slot: int, j: L.JobEntry) -> JobView:
    return JobView(
        slot=slot, job_id=j.job_id, state=j.state, nranks=j.nranks, max_mpl=j.max_mpl, mpl=j.mpl,
        queue=j.queue, heuristic=j.heuristic, spin_us=j.spin_us, generation=j.generation,
        cpus=tuple(j.cpus[: j.ncpus]), leader_pid=j.leader_pid, registered=j.registered,
        suspended=bool(j.suspended), lbd_phase=j.lbd_phase, admit_time=j.admit_time, cvcs=j.cvcs, ip=j.ip,
    )  # fmt: skip


def _rank_view(slot: int, r: L.RankEntry) -> RankView:
    return RankView(
        slot=slot, job_id=r.job_id, rank=r.rank, pid=r.pid, state=r.state, flags=r.flags, cpu=r.cpu,
        ctx_switches=r.ctx_switches, sent_not_consumed=r.sent_not_consumed, unconsumed=r.unconsumed,
        user_time_us=r.user_time_us, mpi_calls=r.mpi_calls, blocking_calls=r.blocking_calls,
    )  # fmt: skip


class SharedTable:
    """One mapped partition table. Use `create`, `attach` or `open_for_manager`."""

    def __init__(self, shm_name: str, lock_name: str, mm: mmap.mmap, lock: posix_ipc.Semaphore) -> None:
        self.shm_name = shm_name
        self.lock_name = lock_name
        self._mm = mm
        self._lock = lock
        self.seg = L.Segment.from_buffer(mm)
        off = L.offsets()
        # Column views of the tables (no copies): scanning 4096 rank slots in Python costs
        # milliseconds, a NumPy comparison microseconds.
        self.rank_cols = np.frombuffer(mm, dtype=np.dtype(L.RankEntry), count=L.MAX_RANKS, offset=off["ranks"])
        self.job_cols = np.frombuffer(mm, dtype=np.dtype(L.JobEntry), count=L.MAX_JOBS, offset=off["jobs"])

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def create(cls, shm_name: str, lock_name: str, cpus: tuple[int, ...], quantum_us: int) -> SharedTable:
        if len(cpus) > L.MAX_CPUS:
            raise TableFull(f"{len(cpus)} CPUs exceed the table's capacity of {L.MAX_CPUS}")
        size = L.segment_size()
        try:
            shm = posix_ipc.SharedMemory(shm_name, posix_ipc.O_CREX, mode=0o644, size=size)
        except posix_ipc.ExistentialError:
            raise TableError(f"shared memory {shm_name} already exists") from None
        # Ranks of every user's jobs register themselves in the table, so it must be writable by all
        # (the umask would narrow the mode given at creation). The node's users are trusted not to
        # scribble on it; a corrupt entry cannot hand one CPU to two jobs (partition.assign_cpus).
        os.fchmod(shm.fd, 0o666)
        mm = mmap.mmap(shm.fd, size)
        shm.close_fd()
        try:
            posix_ipc.unlink_semaphore(lock_name)  # a leftover lock could be held by a dead process
        except posix_ipc.ExistentialError:
            pass
        lock = posix_ipc.Semaphore(lock_name, posix_ipc.O_CREAT, mode=0o666, initial_value=1)
        sem_path = f"/dev/shm/sem.{lock_name.lstrip('/')}"
        if os.path.exists(sem_path):
            os.chmod(sem_path, 0o666)
        t = cls(shm_name, lock_name, mm, lock)
        h = t.seg.header
        h.version, h.header_size = L.VERSION, C.sizeof(L.Header)
        h.max_cpus, h.max_jobs, h.max_ranks = L.MAX_CPUS, L.MAX_JOBS, L.MAX_RANKS
        h.quantum_us, h.manager_pid, h.ncpus = quantum_us, os.getpid(), len(cpus)
        for i in range(L.MAX_CPUS):
            e = t.seg.cpus[i]
            e.cpu = cpus[i] if i < len(cpus) else -1
            e.job_id = e.running_rank = e.last_rank = -1
        h.magic = L.MAGIC  # last: a reader that sees the magic sees a complete table
        return t

    @classmethod
    def attach(cls, shm_name: str, lock_name: str) -> SharedTable:
        """Map an existing table (read/write); checks magic and version."""
        try:
            shm = posix_ipc.SharedMemory(shm_name)
        except posix_ipc.ExistentialError:
            raise TableError(f"no shared memory {shm_name} (is the CPU manager running?)") from None
        if shm.size < L.segment_size():
            shm.close_fd()
            raise TableError(f"shared memory {shm_name} is {shm.size} bytes, expected {L.segment_size()}")
        mm = mmap.mmap(shm.fd, L.segment_size())
        shm.close_fd()
        try:
            lock = posix_ipc.Semaphore(lock_name)
        except posix_ipc.ExistentialError:
            mm.close()
            raise TableError(f"no table lock {lock_name}") from None
        t = cls(shm_name, lock_name, mm, lock)
        h = t.seg.header
        if h.magic != L.MAGIC or h.version != L.VERSION:
            t.close()
            raise TableError(f"shared memory {shm_name} holds no vmsched table of version {L.VERSION}")
        return t

    def close(self) -> None:
        del self.seg, self.rank_cols, self.job_cols  # the views pin the mmap's buffer
        self._mm.close()
        self._lock.close()

    def unlink(self) -> None:
        for fn, name in ((posix_ipc.unlink_shared_memory, self.shm_name),
                         (posix_ipc.unlink_semaphore, self.lock_name)):  # fmt: skip
            try:
                fn(name)
            except posix_ipc.ExistentialError:
                pass

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the table lock. A rank killed inside its (tiny) critical section would leave the
        semaphore taken forever, so after LOCK_TIMEOUT_S the lock is taken to be stale and broken."""
        try:
            self._lock.acquire(LOCK_TIMEOUT_S)
        except posix_ipc.BusyError:
            pass  # stale: proceed as the holder; the release below restores the count to 1
        try:
            yield
        finally:
            self._lock.release()
            # A stale break followed by the old holder's own release would leave the count at 2.
            while self._lock.value > 1:
                self._lock.acquire(0)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def header(self) -> L.Header:
        return self.seg.header

    def managed_cpus(self) -> tuple[int, ...]:
        return tuple(self.seg.cpus[i].cpu for i in range(self.seg.header.ncpus))

    def jobs(self) -> list[JobView]:
        """Admitted jobs in admission order."""
        slots = np.flatnonzero(self.job_cols["state"] != L.JOB_FREE).tolist()
        out = [_job_view(i, self.seg.jobs[i]) for i in slots]
        return sorted(out, key=lambda v: (v.admit_time, v.job_id))

    def rank_slots(self, job_id: int | None = None) -> list[int]:
        used = self.rank_cols["state"] != L.RANK_FREE
        if job_id is not None:
            used &= self.rank_cols["job_id"] == job_id
        return np.flatnonzero(used).tolist()

    def ranks(self, job_id: int | None = None) -> list[RankView]:
        return [_rank_view(i, self.seg.ranks[i]) for i in self.rank_slots(job_id)]

    def rank(self, slot: int) -> RankView:
        return _rank_view(slot, self.seg.ranks[slot])

    def job_slot(self, job_id: int) -> int | None:
        hits = np.flatnonzero((self.job_cols["state"] != L.JOB_FREE) & (self.job_cols["job_id"] == job_id))
        return int(hits[0]) if len(hits) else None

    # -- writing (caller holds the lock) ---------------------------------------------------------
    def add_job(self, job_id: int, nranks: int, max_mpl: int, queue: int, heuristic: int, spin_us: int,
                leader_pid: int, lbd: bool) -> int:  # fmt: skip
        for i, j in enumerate(self.seg.jobs):
            if j.state == L.JOB_FREE:
                C.memset(C.addressof(j), 0, C.sizeof(j))
                j.job_id, j.nranks, j.max_mpl = job_id, nranks, max_mpl
                j.queue, j.heuristic, j.spin_us, j.leader_pid = queue, heuristic, spin_us, leader_pid
                j.lbd_phase = L.LBD_MEASURING if lbd else L.LBD_OFF
                j.admit_time = time.time()
                j.rt_next = 0
                for k in range(L.MAX_CPUS):
                    j.holder[k] = -1
                j.state = L.JOB_ADMITTED
                self._bump()
                return i
        raise TableFull(f"job table full ({L.MAX_JOBS} jobs)")

    def remove_job(self, slot: int) -> None:
        j = self.seg.jobs[slot]
        for c in range(self.seg.header.ncpus):
            if self.seg.cpus[c].job_id == j.job_id:
                self.seg.cpus[c].job_id = -1
        state = self.rank_cols["state"]
        state[(state != L.RANK_FREE) & (self.rank_cols["job_id"] == j.job_id)] = L.RANK_FREE
        j.generation += 1
        j.state = L.JOB_FREE
        self._bump()

    def set_partition(self, slot: int, cpus: tuple[int, ...]) -> bool:
        """Write a job's CPU list; returns whether it changed (then its generation moves)."""
        j = self.seg.jobs[slot]
        if tuple(j.cpus[: j.ncpus]) == cpus:
            return False
        for i, c in enumerate(cpus):
            j.cpus[i] = c
        j.ncpus = len(cpus)
        j.mpl = -(-j.nranks // len(cpus)) if cpus else 0
        if j.state == L.JOB_ADMITTED:
            j.state = L.JOB_RUNNING
        owner = set(cpus)
        for c in range(self.seg.header.ncpus):
            e = self.seg.cpus[c]
            if e.cpu in owner:
                e.job_id = j.job_id
            elif e.job_id == j.job_id:
                e.job_id = -1
        j.generation += 1
        self._bump()
        return True

    def set_queue(self, slot: int, queue: int) -> None:
        j = self.seg.jobs[slot]
        if j.queue != queue:
            j.queue = queue
            j.generation += 1
            self._bump()

    def add_rank(self, job_slot: int, rank: int, pid: int, flags: int) -> int:
        j = self.seg.jobs[job_slot]
        for i, r in enumerate(self.seg.ranks):
            if r.state == L.RANK_FREE:
                C.memset(C.addressof(r), 0, C.sizeof(r))
                r.job_id, r.rank, r.pid, r.flags = j.job_id, rank, pid, flags
                r.job_slot, r.cpu, r.waiting_for, r.wake = job_slot, -1, -1, 1
                r.state = L.RANK_RUNNING
                j.registered += 1
                self._bump()
                return i
        raise TableFull(f"rank table full ({L.MAX_RANKS} ranks)")

    def free_rank(self, slot: int) -> None:
        self.seg.ranks[slot].state = L.RANK_FREE
        self._bump()

    def _bump(self) -> None:
        self.seg.header.generation += 1
