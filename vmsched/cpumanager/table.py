"""Access to the shared memory: the node table (`SharedTable`) and the job segments (`JobSegmentFile`).

Readers get plain frozen snapshots (`JobView`, `RankView`); every write to the node table goes through
the methods of `SharedTable`, under the table's lock (they check that it is held). A job segment is
written by its job's ranks: the manager reads it only as a copy taken with pread (a user who truncates
it cannot make the root daemon fault) and validates every field of that copy before use.
"""

from __future__ import annotations

import ctypes as C
import mmap
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import posix_ipc

from vmsched.cpumanager import shm_layout as L

LOCK_TIMEOUT_S = float(L.LOCK_TIMEOUT_S)
SHM_DIR = "/dev/shm"


class TableError(RuntimeError):
    """The table cannot be created, attached or updated; the message says why."""


class ForeignTable(TableError):
    """A segment under the table's name that this process did not create (another user's forgery)."""


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
    uid: int
    rt_name: str
    admit_time: float
    cvcs: float
    ip: float
    placement: int = L.PLACE_CYCLIC


@dataclass(frozen=True)
class RankView:
    """A rank slot as a job segment claims it: untrusted until the manager verified `pid`."""

    rank: int
    pid: int
    state: int
    flags: int
    cpu: int
    ctx_switches: int
    mpi_calls: int


def _job_view(slot: int, j: L.JobEntry) -> JobView:
    return JobView(
        slot=slot, job_id=j.job_id, state=j.state, nranks=j.nranks, max_mpl=j.max_mpl, mpl=j.mpl,
        queue=j.queue, heuristic=j.heuristic, spin_us=j.spin_us, generation=j.generation,
        cpus=tuple(j.cpus[: j.ncpus]), leader_pid=j.leader_pid, registered=j.registered,
        suspended=bool(j.suspended), lbd_phase=j.lbd_phase, uid=j.uid, rt_name=j.rt_name.decode(errors="replace"),
        admit_time=j.admit_time, cvcs=j.cvcs, ip=j.ip, placement=j.placement,
    )  # fmt: skip


class SharedTable:
    """One mapped partition table. Use `create`, `attach` or `open_for_manager`."""

    def __init__(self, shm_name: str, lock_name: str, mm: mmap.mmap, lock: posix_ipc.Semaphore) -> None:
        self.shm_name = shm_name
        self.lock_name = lock_name
        self._mm = mm
        self._lock = lock
        self._held = False
        self.seg = L.Segment.from_buffer(mm)
        # A column view of the job table (no copy): a NumPy comparison beats a Python scan.
        self.job_cols = np.frombuffer(mm, dtype=np.dtype(L.JobEntry), count=L.MAX_JOBS, offset=L.offsets()["jobs"])

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def create(cls, shm_name: str, lock_name: str, cpus: tuple[int, ...], quantum_us: int) -> SharedTable:
        if len(cpus) > L.MAX_CPUS:
            raise TableFull(f"{len(cpus)} CPUs exceed the table's capacity of {L.MAX_CPUS}")
        size = L.segment_size()
        remove_job_segments(shm_name)  # of a manager that was killed and whose table is gone
        try:
            shm = posix_ipc.SharedMemory(shm_name, posix_ipc.O_CREX, mode=0o644, size=size)
        except posix_ipc.ExistentialError:
            raise TableError(f"shared memory {shm_name} already exists") from None
        # Readable by every rank (partitions, generations), writable only by the manager; what ranks
        # write lives in their own job's segment (docs/security.md).
        os.fchmod(shm.fd, 0o644)
        mm = mmap.mmap(shm.fd, size)
        shm.close_fd()
        try:
            posix_ipc.unlink_semaphore(lock_name)  # a leftover lock could be held by a dead process
        except posix_ipc.ExistentialError:
            pass
        # The manager's own lock (no rank takes it): nobody else may hold it and stall the manager.
        try:  # exclusive: a semaphore someone slipped in after the unlink is refused, never used
            lock = posix_ipc.Semaphore(lock_name, posix_ipc.O_CREX, mode=0o600, initial_value=1)
        except posix_ipc.ExistentialError:
            mm.close()
            posix_ipc.unlink_shared_memory(shm_name)
            raise TableError(f"table lock {lock_name} was created by someone else meanwhile") from None
        t = cls(shm_name, lock_name, mm, lock)
        h = t.seg.header
        h.version, h.header_size = L.VERSION, C.sizeof(L.Header)
        h.max_cpus, h.max_jobs, h.max_ranks = L.MAX_CPUS, L.MAX_JOBS, L.MAX_RANKS
        h.quantum_us, h.manager_pid, h.ncpus = quantum_us, os.getpid(), len(cpus)
        for i in range(L.MAX_CPUS):
            e = t.seg.cpus[i]
            e.cpu = cpus[i] if i < len(cpus) else -1
            e.job_id = -1
        h.magic = L.MAGIC  # last: a reader that sees the magic sees a complete table
        return t

    @classmethod
    def attach(cls, shm_name: str, lock_name: str) -> SharedTable:
        """Map an existing table (read/write); checks magic and version."""
        try:
            shm = posix_ipc.SharedMemory(shm_name)
        except posix_ipc.ExistentialError:
            raise TableError(f"no shared memory {shm_name} (is the CPU manager running?)") from None
        st = os.fstat(shm.fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            shm.close_fd()
            raise ForeignTable(f"shared memory {shm_name} belongs to uid {st.st_uid} with mode "
                               f"{oct(st.st_mode & 0o777)}; it is no table of this manager")  # fmt: skip
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
        del self.seg, self.job_cols  # the views pin the mmap's buffer
        self._mm.close()
        self._lock.close()

    def unlink(self) -> None:
        remove_table(self.shm_name, self.lock_name)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the table lock. A rank killed inside its (tiny) critical section would leave the
        semaphore taken forever, so after LOCK_TIMEOUT_S the lock is taken to be stale and broken."""
        try:
            self._lock.acquire(LOCK_TIMEOUT_S)
        except posix_ipc.BusyError:
            pass  # stale: proceed as the holder; the release below restores the count to 1
        self._held = True
        try:
            yield
        finally:
            self._held = False
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

    def job_slot(self, job_id: int) -> int | None:
        hits = np.flatnonzero((self.job_cols["state"] != L.JOB_FREE) & (self.job_cols["job_id"] == job_id))
        return int(hits[0]) if len(hits) else None

    # -- writing (each method checks that the caller holds the lock) -------------------------------
    def _check_held(self) -> None:
        if not self._held:
            raise TableError("node table written without its lock")

    def add_job(self, job_id: int, nranks: int, max_mpl: int, queue: int, heuristic: int, spin_us: int,
                leader_pid: int, lbd: bool, uid: int = 0, rt_name: str = "",
                placement: int = L.PLACE_CYCLIC) -> int:  # fmt: skip
        self._check_held()
        for i, j in enumerate(self.seg.jobs):
            if j.state == L.JOB_FREE:
                C.memset(C.addressof(j), 0, C.sizeof(j))
                j.job_id, j.nranks, j.max_mpl = job_id, nranks, max_mpl
                j.queue, j.heuristic, j.spin_us, j.leader_pid = queue, heuristic, spin_us, leader_pid
                j.uid, j.rt_name, j.placement = uid, rt_name.encode(), placement
                j.lbd_phase = L.LBD_MEASURING if lbd else L.LBD_OFF
                j.admit_time = time.time()
                j.state = L.JOB_ADMITTED
                self._bump()
                return i
        raise TableFull(f"job table full ({L.MAX_JOBS} jobs)")

    def remove_job(self, slot: int) -> None:
        self._check_held()
        j = self.seg.jobs[slot]
        for c in range(self.seg.header.ncpus):
            if self.seg.cpus[c].job_id == j.job_id:
                self.seg.cpus[c].job_id = -1
        j.generation += 1
        j.state = L.JOB_FREE
        self._bump()

    def set_partition(self, slot: int, cpus: tuple[int, ...]) -> bool:
        """Write a job's CPU list; returns whether it changed (then its generation moves)."""
        self._check_held()
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
        self._set_scheduling(slot, "queue", queue)

    def set_placement(self, slot: int, placement: int) -> None:
        self._set_scheduling(slot, "placement", placement)

    def _set_scheduling(self, slot: int, field: str, value: int) -> None:
        """Write how a job's ranks are scheduled (queue type, placement); a change moves its generation,
        so that its ranks rebuild their tokens and re-pin."""
        self._check_held()
        j = self.seg.jobs[slot]
        if getattr(j, field) != value:
            setattr(j, field, value)
            j.generation += 1
            self._bump()

    def set_max_mpl(self, slot: int, max_mpl: int) -> None:
        self._check_held()
        self.seg.jobs[slot].max_mpl = max_mpl
        self._bump()

    def set_leader(self, slot: int, pid: int) -> None:
        self._check_held()
        self.seg.jobs[slot].leader_pid = pid
        self._bump()

    def set_suspended(self, slot: int, suspended: bool) -> None:
        self._check_held()
        self.seg.jobs[slot].suspended = int(suspended)
        self._bump()

    def set_registered(self, slot: int, n: int) -> None:
        self._check_held()
        self.seg.jobs[slot].registered = n

    def set_lbd(self, slot: int, phase: int, cvcs: float, ip: float | None = None) -> None:
        self._check_held()
        j = self.seg.jobs[slot]
        j.lbd_phase, j.cvcs = phase, cvcs
        if ip is not None:
            j.ip = ip

    def set_queue_waiting(self, waiting: bool) -> None:
        self._check_held()
        self.seg.header.queue_waiting = int(waiting)

    def set_heartbeat(self, quanta: int) -> None:
        self._check_held()
        self.seg.header.heartbeat = quanta

    def set_manager_pid(self, pid: int) -> None:
        self._check_held()
        self.seg.header.manager_pid = pid

    def set_shutdown(self) -> None:
        self._check_held()
        self.seg.header.shutdown = 1

    def _bump(self) -> None:
        self.seg.header.generation += 1


_RANK_DTYPE = np.dtype(L.RankEntry)


def remove_job_segments(shm_name: str) -> list[str]:
    """Unlink every job segment of the table `shm_name` (named `<shm_name>.j<job>.<random>`)."""
    prefix = shm_name.lstrip("/") + ".j"
    removed = []
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
    except OSError:
        return removed
    for n in names:
        try:
            os.unlink(os.path.join(SHM_DIR, n))
            removed.append(n)
        except OSError:
            pass
    return removed


def remove_table(shm_name: str, lock_name: str) -> None:
    """Remove a table, its lock and its job segments (an orderly stop, or what a killed manager left)."""
    for fn, name in ((posix_ipc.unlink_shared_memory, shm_name), (posix_ipc.unlink_semaphore, lock_name)):
        try:
            fn(name)
        except posix_ipc.ExistentialError:
            pass
    remove_job_segments(shm_name)


class JobSegmentFile:
    """A job's segment as the manager holds it: an fd (for pread/pwrite) and a mapping (only for the
    addresses of the futex words: the kernel answers a futex call on a truncated page with EFAULT,
    where a load or store from Python would be a SIGBUS that kills the daemon)."""

    def __init__(self, name: str, fd: int, nranks: int) -> None:
        self.name, self.fd, self.nranks = name, fd, nranks
        self.size = L.job_segment_size(nranks)
        self._mm = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
        self._view = np.frombuffer(self._mm, dtype=np.uint8)  # never read: only its address is used
        self._base: int = self._view.ctypes.data

    @staticmethod
    def path(name: str) -> str:
        return os.path.join(SHM_DIR, name.lstrip("/"))

    @classmethod
    def create(cls, prefix: str, job_id: int, nranks: int, uid: int) -> JobSegmentFile:
        """A new segment under an unguessable name (nobody can create it first), owned by `uid`, 0600."""
        name = f"{prefix}.j{job_id}.{secrets.token_hex(8)}"
        fd = os.open(cls.path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, L.job_segment_size(nranks))
            head = L.JobRt(magic=L.JOB_MAGIC, job_id=job_id, nranks=nranks)
            for i in range(L.MAX_CPUS):
                head.holder[i] = head.cpu_running[i] = head.cpu_last[i] = -1
            os.pwrite(fd, bytes(head), 0)
            os.fchown(fd, uid, -1)
            os.fchmod(fd, 0o600)
            return cls(name, fd, nranks)
        except BaseException:
            os.close(fd)
            os.unlink(cls.path(name))
            raise

    @classmethod
    def open(cls, name: str, nranks: int, uid: int) -> JobSegmentFile:
        """Reopen a job's segment after a manager restart: a regular file owned by the job's user."""
        if not name or "/" in name.lstrip("/") or not 1 <= nranks <= L.MAX_RANKS:
            raise TableError(f"bad job segment {name!r}")
        fd = os.open(cls.path(name), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size < L.job_segment_size(nranks):
            os.close(fd)
            raise TableError(f"job segment {name} is not a segment of uid {uid} for {nranks} ranks")
        return cls(name, fd, nranks)

    def close(self) -> None:
        del self._view  # it pins the mapping
        self._mm.close()
        os.close(self.fd)

    def unlink(self) -> None:
        try:
            os.unlink(self.path(self.name))
        except FileNotFoundError:
            pass

    def snapshot(self) -> np.ndarray:
        """A copy of the rank slots (a short read, from a truncated segment, gives fewer rows)."""
        off = C.sizeof(L.JobRt)
        want = self.nranks * _RANK_DTYPE.itemsize
        try:
            raw = os.pread(self.fd, want, off)
        except OSError:
            raw = b""
        return np.frombuffer(raw[: len(raw) - len(raw) % _RANK_DTYPE.itemsize], dtype=_RANK_DTYPE)

    def write_rank(self, rank: int, pid: int, flags: int) -> None:
        """Fill rank `rank`'s slot for a process the manager registers itself (not an MPI rank)."""
        e = L.RankEntry(rank=rank, pid=pid, state=L.RANK_RUNNING, flags=flags, cpu=-1, waiting_for=-1,
                        wake=L.WAKE_RUN)  # fmt: skip
        os.pwrite(self.fd, bytes(e), self._rank_offset(rank))

    def mark_done(self, rank: int, pid: int) -> None:
        """End rank `rank`'s slot if it still names `pid` (a process that exited, or one `forget` named)."""
        off = self._rank_offset(rank)
        try:
            if int.from_bytes(os.pread(self.fd, 4, off + L.RankEntry.pid.offset), "little", signed=True) == pid:
                os.pwrite(self.fd, L.RANK_DONE.to_bytes(4, "little"), off + L.RankEntry.state.offset)
        except OSError:
            pass

    def release_waiter(self, rank: int) -> None:
        """Let rank `rank` stop waiting (shutdown): its wake word says run, then a futex wake."""
        off = self._rank_offset(rank) + L.RankEntry.wake.offset
        os.pwrite(self.fd, L.WAKE_RUN.to_bytes(4, "little"), off)
        self.wake(rank)

    def wake(self, rank: int) -> None:
        from vmsched.cpumanager.processes import futex_wake

        futex_wake(self._base + self._rank_offset(rank) + L.RankEntry.wake.offset)

    def _rank_offset(self, rank: int) -> int:
        if not 0 <= rank < self.nranks:
            raise TableError(f"rank {rank} outside the job's {self.nranks} slots")
        return C.sizeof(L.JobRt) + rank * C.sizeof(L.RankEntry)
