"""One job supervisor for `vmrun` and the launcher's shim: start the job's top process (mpiexec), forward
signals to it, kill what has not ended one grace time ([jobs] kill_grace_s) after a terminating signal,
note the shared-memory segments the job maps (and hydra's topology file its proxies hold open) and remove
what is left of them at the end, and map the exit
status (a signal death reads as 128 + signal number, as in a shell).

It lives at level 3 because `vmrun` (level 3) must work without the launcher; the shim (level 1) imports
it, as it already imports the runtime's environment and command line.

Why escalate at all: a rank that takes a KeyboardInterrupt exits through MPI_Finalize while its peers
wait for it inside MPI, and hydra, seeing no rank exit, would wait forever (folded, only the token holder
runs Python code); and a rank may simply ignore SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import psutil

from vmsched.proctrack import ExitWatcher
from vmsched.vmruntime.shmclean import LOOK_SLOW_S, JobLooks, is_hydra, orphaned, remove_owned, unmapped

HYDRA_EXIT_S = 2.0  # after its ranks are killed, hydra exits by itself within this
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Outcome:
    exit_code: int  # the job's status, 128 + N for a death by signal N
    escalated: bool  # its processes were killed after the grace time
    removed_shm: list[str] = field(default_factory=list)  # left behind by the job, removed
    noted_shm: list[str] = field(default_factory=list)  # every segment its processes were seen to map


NICE_FLOOR_LIMIT = 20  # RLIMIT_NICE 20: a process may set its nice value as low as 20 - 20 = 0, no lower


def allow_priority_back() -> None:
    """Let the job's ranks (which inherit this process's limits) raise their priority back to nice 0
    after borrowing a CPU at a lower one (`VMRT_BORROW_NICE`, libvmrt's `borrow_priority`; by default a
    borrower keeps its priority). An unprivileged process may lower its nice value only as far as
    RLIMIT_NICE allows, and its usual limit of 0 allows no lowering at all, so without this an
    unprivileged rank borrows at its own priority. 20 allows nice 0 and nothing below: no more than
    every process starts with. Raised as far as the hard limit lets (as root: to 20); a
    limit already higher is kept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= NICE_FLOOR_LIMIT:
        return
    if hard != resource.RLIM_INFINITY and hard < NICE_FLOOR_LIMIT and os.geteuid() == 0:
        hard = NICE_FLOOR_LIMIT
    new_soft = NICE_FLOOR_LIMIT if hard == resource.RLIM_INFINITY else min(NICE_FLOOR_LIMIT, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NICE, (new_soft, hard))
    except (ValueError, OSError):
        pass  # the runtime then borrows at the rank's own priority


def exit_status(returncode: int) -> int:
    """Popen's returncode (-N for signal N) as a shell shows it."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(start: Callable[[], subprocess.Popen], grace_s: float,
              forwarded: tuple[signal.Signals, ...] = TERMINATING,
              ignored: tuple[signal.Signals, ...] = (), owner: tuple[int, int] | None = None) -> Outcome:  # fmt: skip
    """Start the job with `start()` (its OSError propagates) and supervise it until it has ended.

    `forwarded` signals go to the job's top process; the terminating ones among them start the grace
    time (a second one ends it at once); `ignored` signals are ignored meanwhile. The handlers are
    installed before the start (a signal that arrives meanwhile is forwarded once the job exists) and
    restored at the end. `owner` (uid, gid) is the job's user when it is not ours: only segments it owns
    are removed, and its processes' mappings are read by a watcher running as that user."""
    child: subprocess.Popen | None = None
    pending: list[int] = []
    signalled: list[float] = []  # when the first terminating signal arrived (0: kill now)

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum in TERMINATING:
            if signalled:
                signalled[0] = 0.0
            else:
                signalled.append(time.monotonic())
        if child is None:
            pending.append(signum)
        else:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in forwarded}
    old.update({s: signal.signal(s, signal.SIG_IGN) for s in ignored})
    try:
        since = time.time()
        child = start()
        for s in pending:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(s)
        return _wait(child, signalled, grace_s, owner, since)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _Wakeups:
    """What the wait loop sleeps on: the job's top process ending (its pidfd) and any signal (Python's
    wakeup fd), so that it sleeps as long as the looks allow and still answers at once. Popen.wait(timeout)
    instead polls every 50 ms, and a signal that came during a long wait (a look a second, once the job has
    settled) was seen only at its end: a second SIGINT, which is to kill at once, came after the job's top
    process had died of the first one and left its rank running (tests/test_supervisor.py)."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.exits = ExitWatcher()
        # False on an old kernel (no pidfds) or when the child is gone already: then poll, as Popen.wait does.
        self.watched = self.exits.watch("job", child.pid)
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        try:
            self.old_fd = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: no handler of ours runs there either
            self.old_fd = None

    def wait(self, timeout: float) -> int | None:
        """The job's exit status once it has ended, else None after `timeout` or at a signal."""
        fds = [self.r, self.exits.fileno()] if self.watched else [self.r]
        with contextlib.suppress(InterruptedError):
            select.select(fds, [], [], timeout if self.watched else min(timeout, 0.05))
        with contextlib.suppress(BlockingIOError):
            while os.read(self.r, 512):
                pass
        return self.child.poll()

    def close(self) -> None:
        if self.old_fd is not None:
            signal.set_wakeup_fd(self.old_fd)
        self.exits.close()
        os.close(self.r)
        os.close(self.w)


def _wait(
    child: subprocess.Popen, signalled: list[float], grace_s: float, owner: tuple[int, int] | None, since: float
) -> Outcome:
    uid = os.geteuid() if owner is None else owner[0]
    notes = SegmentNotes(child.pid, owner if owner is not None and os.geteuid() == 0 and uid != 0 else None)
    wakeups = _Wakeups(child)
    escalated = False
    try:
        next_look = time.monotonic() + notes.interval()
        while True:
            now = time.monotonic()
            if now >= next_look:
                notes.poll()
                next_look = now + notes.interval()
            if signalled and not escalated and now >= signalled[0] + grace_s:
                escalated = True
                kill_tree(child)
            until = next_look if not signalled or escalated else min(next_look, signalled[0] + grace_s)
            rc = wakeups.wait(max(0.0, until - now))
            if rc is not None:
                break
    finally:
        wakeups.close()
        segments = notes.close()
    # Ranks killed inside MPI_Init, between two looks, leave a segment nobody was seen to map.
    segments |= orphaned(uid, since)
    # One that a live process still maps is in use (by a process the job left behind): left alone. The
    # job's ranks are gone by now (hydra reaps them before it exits); a process whose maps cannot be
    # read from here (another user's, without CAP_SYS_PTRACE) is not seen.
    removed = [p for p in sorted(unmapped(segments)) if remove_owned(p, uid)]
    return Outcome(exit_status(rc), escalated, removed, sorted(segments))


class SegmentNotes:
    """The /dev/shm segments the job's processes map, noted while it runs.

    Why a watcher process: reading another user's /proc/PID/maps needs CAP_SYS_PTRACE, which the
    hardened launcher unit does not grant (systemd/vm-launcher.service), so a root supervisor of another
    user's job forks a watcher that drops to that user and reports what it sees through a pipe. What it
    reports is only ever used to remove files that user owns (see `_wait`)."""

    def __init__(self, root_pid: int, as_user: tuple[int, int] | None) -> None:
        self.root_pid = root_pid
        self.looks = JobLooks(root_pid)  # in this process, where there is no watcher
        self.found: set[str] = set()
        self.watcher: int | None = None
        self.pipe = -1
        self.buf = b""
        if as_user is not None:
            try:
                self._fork_watcher(*as_user)
            except OSError:  # no process to spare: note what can be read from here, the job goes on
                self.watcher = None

    def _fork_watcher(self, uid: int, gid: int) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the watcher: never returns
            code = 0
            try:
                os.close(r)
                for sig in (*TERMINATING, signal.SIGUSR1):  # not the supervisor's handlers: a signal ends it
                    signal.signal(sig, signal.SIG_DFL)
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                _killed_with_parent()  # after setuid, which clears it
                _watch(self.root_pid, w)
            except BaseException:  # noqa: BLE001 - a watcher that cannot watch just ends; the job goes on
                code = 1
            os._exit(code)
        os.close(w)
        os.set_blocking(r, False)
        self.watcher, self.pipe = pid, r

    def interval(self) -> float:
        """Seconds until the next poll: the looks' own pace, or the watcher's slowest (it looks itself)."""
        return self.looks.interval() if self.watcher is None else LOOK_SLOW_S

    def poll(self) -> None:
        if self.watcher is None:
            self.found |= self.looks.look()
            return
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.pipe, 65536):
                self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        self.found.update(line.decode(errors="replace") for line in lines if line)

    def close(self) -> set[str]:
        """Stop watching (the job has ended) and return every segment noted."""
        if self.watcher is not None:
            self.poll()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.watcher, signal.SIGKILL)
            os.waitpid(self.watcher, 0)
            self.poll()
            os.close(self.pipe)
            self.watcher = None
        return self.found


def _watch(root_pid: int, out: int) -> None:
    """In the watcher: report each segment the job's processes map, once, until the job's top process ends."""
    seen: set[str] = set()
    looks = JobLooks(root_pid)
    while True:
        try:
            if psutil.Process(root_pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.Error:
            return
        new = looks.look() - seen
        if new:
            os.write(out, "".join(f"{p}\n" for p in sorted(new)).encode())
            seen |= new
        time.sleep(looks.interval())


def _killed_with_parent() -> None:
    """The calling process gets SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def kill_tree(child: subprocess.Popen) -> None:
    """SIGKILL the ranks; hydra then sees them die, reaps them and exits by itself. Whatever of the tree
    (proxies, mpiexec) is still there a moment later is killed too. Only descendants of `child`."""
    try:
        procs = psutil.Process(child.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    hydra = [p for p in procs if is_hydra(p.pid)]
    for p in procs:
        if p not in hydra:
            with contextlib.suppress(psutil.Error):
                p.kill()
    try:
        child.wait(HYDRA_EXIT_S)
        return
    except subprocess.TimeoutExpired:
        pass
    for p in hydra:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        child.kill()
