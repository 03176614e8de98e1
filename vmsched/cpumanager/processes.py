"""What the CPU manager does to processes: liveness, affinity, CPU time, stop/continue, futex wake,
and the check that a process belongs to a job before the manager acts on it.

The thin, side-effecting edge of the daemon; everything here acts on one pid and reports failure
instead of raising, because ranks may exit at any moment.
"""

from __future__ import annotations

import ctypes
import os
import signal

import psutil

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = 202 if os.uname().machine == "x86_64" else 98  # aarch64
_FUTEX_WAKE = 1
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an exited rank its parent has not reaped yet)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


MAX_ANCESTRY = 64  # a rank sits a few levels below its leader (vmrun -> mpiexec -> proxy -> rank)


def _status_fields(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None


def parent(pid: int) -> int | None:
    st = _status_fields(pid)
    try:
        return int(st["PPid"]) if st else None
    except (KeyError, ValueError):
        return None


def belongs_to_job(pid: int, uid: int, leader: int) -> str | None:
    """None if `pid` runs entirely as `uid` (real, effective, saved and filesystem uid: a setuid
    program the user started is not theirs to have stopped by root) and - when the job has a leader -
    descends from `leader`; else why not. The caller holds a pidfd opened before this check and
    confirms afterwards that the process is still alive, so the answer is about that process."""
    st = _status_fields(pid)
    if st is None or "Uid" not in st:
        return f"no process {pid}"
    if st.get("State", "").strip().startswith(("Z", "X")):
        return f"process {pid} has exited"
    if any(int(u) != uid for u in st["Uid"].split()):
        return f"process {pid} does not run as uid {uid} (uids {st['Uid'].split()})"
    if not leader:
        return None
    p = parent(pid)
    for _ in range(MAX_ANCESTRY):
        if p == leader:
            return None
        if p is None or p <= 1:
            break
        p = parent(p)
    return f"process {pid} does not descend from the job's leader {leader}"


def process_uid(pid: int) -> int | None:
    """Real uid of `pid`."""
    st = _status_fields(pid)
    try:
        return int(st["Uid"].split()[0]) if st else None
    except (KeyError, ValueError, IndexError):
        return None


def start_time(pid: int) -> float | None:
    """Process creation time, to tell a rank from a later process that reuses its pid."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def user_time_us(pid: int) -> int | None:
    # Read /proc/<pid>/stat directly: psutil builds a Process object per call, too slow for
    # every rank every quantum.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[11]) * 1_000_000 // _CLK_TCK  # utime, field 14 of stat


def cpu_time_us(pid: int) -> int | None:
    """CPU time (user + system) in microseconds, from the scheduler's nanosecond count.

    For the LBD's idleness window: /proc utime advances in 10 ms ticks, which over a window of a
    few hundred ms is noise of the same size as the 10 % threshold. Under self-coscheduling a rank
    that waits is blocked, not spinning, so CPU time is the time it did work."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) // 1000
    except (OSError, ValueError, IndexError):
        return None


def cpu_idle_s() -> dict[int, float]:
    """Idle seconds (idle + iowait) of each online CPU since boot, by CPU number, from /proc/stat ({} if
    it cannot be read). For the LBD's trials: a CPU of the job's partition that no rank uses is CPU time
    the job had and left. Parsed here rather than with psutil.cpu_times(percpu=True), whose list drops
    the CPU numbers (offline CPUs shift it). The kernel counts idle time to the nanosecond but prints
    ticks (10 ms); over a window of a few hundred CPU-milliseconds that is an error of a few percent."""
    out: dict[int, float] = {}
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if not line.startswith(b"cpu") or line[3:4] == b" ":
                    continue
                name, _user, _nice, _system, idle, iowait, *_ = line.split()
                out[int(name[3:])] = (int(idle) + int(iowait)) / _CLK_TCK
    except (OSError, ValueError):
        return {}
    return out


def affinity_within(pid: int, cpus: tuple[int, ...]) -> bool:
    """Whether the process may run only on some of `cpus` (False if it is gone)."""
    try:
        return os.sched_getaffinity(pid) <= set(cpus)
    except OSError:
        return False


def set_affinity(pid: int, cpus: tuple[int, ...]) -> bool:
    try:
        os.sched_setaffinity(pid, cpus)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def send_signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def futex_wake(address: int, count: int = 1 << 30) -> None:
    """Wake waiters on a futex word in the shared table (a rank blocked at an MPI wait)."""
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, count, None, None, 0)
