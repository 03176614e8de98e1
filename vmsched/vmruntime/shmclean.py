"""MPICH's intranode segments (/dev/shm/mpich_shm_*) are removed at MPI_Finalize; a job whose ranks
were killed leaves them behind. Whoever starts a job notes what its processes map while it runs and
removes what is left once they are all gone (the same rule as vmsched.launcher.shim); a segment made
and orphaned between two looks (ranks killed inside MPI_Init) is found at the end by `orphaned`, and so
is a segment of UCX's (/dev/shm/ucx_shm_posix_*, ch4:ucx), which UCX unlinks right after making it: only
a rank killed in between leaves one, and no look can have seen it mapped under its name.
So is hydra's topology file (/tmp/hydra_hwloc_xmlfile_*): mpiexec writes it for its proxies, a proxy
holds it open and removes it when the job ends normally, and a job that calls MPI_Abort or is killed
leaves it in /tmp (one per aborted job; the suite's abort tests left two per run)."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time

import psutil

from vmsched.cpumanager.shm_layout import JOB_SHM_PREFIXES
from vmsched.cpumanager.shm_layout import MPICH_SHM_PREFIX as MPICH_PREFIX


def mapped_segments(pid: int, prefix: str = "/dev/shm/") -> set[str]:
    """POSIX shared-memory files under `prefix` that `pid` maps, never vmsched's own (/proc/<pid>/maps)."""
    return _read_maps(pid, prefix) or set()


def _read_maps(pid: int, prefix: str) -> set[str] | None:
    """mapped_segments, or None if the maps cannot be read (a process that is gone maps nothing).

    Read as bytes: a rank maps a hundred and more libraries, its supervisor looks ten times a second at
    a job's start, and a polling rank loses its CPU to every millisecond of decoding them; and a path
    that is not UTF-8 (any user may name a file in /dev/shm so) is kept as os.fsdecode makes it."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return set()  # gone meanwhile
    except OSError:
        return None
    key, found = os.fsencode(prefix), set()
    for line in maps.splitlines():
        i = line.find(key)
        if i >= 0 and b"vmsched" not in line:
            found.add(os.fsdecode(line[i:]).removesuffix(" (deleted)"))
    return found


# Where a job's leftovers may be removed: directly in these directories (never below them, so that no
# path a job's user can write leads elsewhere), with this name prefix.
REMOVABLE = {"/dev/shm": "", "/tmp": "hydra_hwloc_xmlfile_"}
HYDRA_TOPOLOGY_PREFIX = "/tmp/" + REMOVABLE["/tmp"]


def topology_files(pid: int) -> set[str]:
    """hydra's topology files that `pid` holds open (/proc/<pid>/fd)."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found  # gone, or not ours to read
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(HYDRA_TOPOLOGY_PREFIX) and "/" not in target[len(HYDRA_TOPOLOGY_PREFIX) :]:
                found.add(target.removesuffix(" (deleted)"))
    return found


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants; none if it is gone."""
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


# How hydra's processes are told from the ranks: by their command name (/proc/<pid>/comm).
HYDRA_NAMES = (b"hydra_", b"mpiexec")


def is_hydra(pid: int) -> bool:
    """Whether `pid` is one of hydra's processes (mpiexec or a proxy), not a rank."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().startswith(HYDRA_NAMES)
    except OSError:
        return False


def job_files(pid: int) -> set[str]:
    """What `pid` and its descendants may leave behind if killed: the shared-memory segments they map
    and hydra's topology files they hold open (cheap enough to call a few times a second)."""
    return files_of(_tree(pid))


def files_of(pids: list[int]) -> set[str]:
    """job_files of these processes. Only hydra's processes hold a topology file open (its proxies do),
    so only theirs are looked through: a rank's descriptors (sockets, its peers' segments) are many, and
    reading each costs a syscall."""
    found: set[str] = set()
    for p in pids:
        found |= mapped_segments(p)
        if is_hydra(p):
            found |= topology_files(p)
    return found


# How often a job's files are looked for: often while its processes start (a job may be killed within a
# second of its start, and MPICH maps its segment in MPI_Init), then every second.
LOOK_FAST_S, LOOK_SLOW_S, LOOK_FAST_FOR_S = 0.1, 1.0, 5.0


class JobLooks:
    """The files a running job may leave behind (job_files), looked for every LOOK_FAST_S until the job
    has settled, then every LOOK_SLOW_S: settled is two looks in a row that found the same processes and
    the same files, a segment in /dev/shm among them (or LOOK_FAST_FOR_S since the start).

    Why not fast for the first 5 s, as before: a look lists every process of the node (psutil reads each
    one's /proc/<pid>/stat to find the job's) and reads the maps of each of the job's, 2.3 ms of CPU for
    4 ranks, and a job whose ranks poll or hand their CPUs over every few microseconds loses more than
    that: halo-persist, 4 ranks on 2 CPUs, run without tokens under vmrun, 1.67 s looked at every 0.1 s,
    1.46 s not looked at (plain MPICH, each rank pinned by hand, 1.54 s; medians of 6, 2026-12-01). A job
    killed between two looks loses nothing: what it made since its start and nobody maps is found at the
    end (`orphaned`)."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.began = time.monotonic()
        self.last: tuple[frozenset[int], frozenset[str]] | None = None
        self.settled = False

    def look(self) -> set[str]:
        """What the job's processes map or hold open now."""
        pids = _tree(self.root_pid)
        found = files_of(pids)
        seen = (frozenset(pids), frozenset(found))
        if seen == self.last and any(p.startswith("/dev/shm/") for p in found):
            self.settled = True
        self.last = seen
        return found

    def interval(self) -> float:
        """Seconds until the next look."""
        fast = not self.settled and time.monotonic() - self.began < LOOK_FAST_FOR_S
        return LOOK_FAST_S if fast else LOOK_SLOW_S


def shm_segments(pid: int) -> set[str]:
    """POSIX shared-memory files mapped by `pid` and its descendants, never vmsched's own table
    (cheap enough to call a few times a second)."""
    return set().union(*(mapped_segments(p) for p in _tree(pid)))


# A segment younger than this may be one that another job of the same user has just made and not yet
# mapped (MPICH maps it right after creating it): such a candidate is looked at again after this long.
SETTLE_S = 0.3
# The kernel stamps a file's ctime from its coarse clock, a tick behind time.time() at most.
CLOCK_SLACK_S = 0.05


def orphaned(uid: int, since: float) -> set[str]:
    """MPICH's and UCX's segments (JOB_SHM_PREFIXES) owned by `uid`, made or changed since `since` (wall
    clock, the job's start), that no process maps: those of a job whose ranks were killed between two of
    its supervisor's looks.

    Only what can be seen counts as unmapped: if the maps of a process that could map such a segment
    (one of `uid`'s or root's, but init, whose maps a container may hide even from root) cannot be
    read, nothing is called orphaned. A segment another live job of the same user maps is never one;
    one made in the last SETTLE_S is looked at again after that long.
    """
    found = _unmapped(_made_since(uid, since), uid)
    if found and _youngest(found) > time.time() - SETTLE_S:
        time.sleep(SETTLE_S)
        found = _unmapped(found & _made_since(uid, since), uid)
    return found


def _youngest(paths: set[str]) -> float:
    times = []
    for path in paths:
        with contextlib.suppress(OSError):
            times.append(os.lstat(path).st_ctime)
    return max(times, default=0.0)


def _made_since(uid: int, since: float) -> set[str]:
    out = set()
    with os.scandir("/dev/shm") as entries:
        for e in entries:
            if e.path.startswith(JOB_SHM_PREFIXES):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_uid == uid and st.st_ctime >= since - CLOCK_SLACK_S:
                    out.add(e.path)
    return out


def unmapped(candidates: set[str]) -> set[str]:
    """Those of `candidates` that no process maps, as far as can be seen (processes whose maps cannot
    be read are skipped)."""
    return _unmapped(candidates, None)


def _unmapped(candidates: set[str], uid: int | None) -> set[str]:
    if not candidates:
        return set()
    left = set(candidates)
    unreadable = [p.pid for p in psutil.process_iter(["uids"]) if not _drop_mapped(p.pid, left) and _may_map(p, uid)]
    for _ in range(3):  # a process in the middle of exec or exit may refuse for a moment
        if not unreadable or not left:
            break
        time.sleep(0.1)
        unreadable = [pid for pid in unreadable if not _drop_mapped(pid, left)]
    return set() if unreadable else left


def _may_map(proc: psutil.Process, uid: int | None) -> bool:
    """Whether `proc` (whose maps could not be read) might map a segment of `uid`'s: init never does."""
    uids = proc.info["uids"]
    return uid is not None and proc.pid != 1 and (uids is None or uids.effective in (0, uid))


def _drop_mapped(pid: int, left: set[str]) -> bool:
    """Remove from `left` what `pid` maps; False if its maps cannot be read."""
    found = _read_maps(pid, "/dev/shm/")
    if found is None:
        return False
    left -= found
    return True


def remove_owned(path: str, uid: int) -> bool:
    """Unlink `path` if it is a regular file owned by `uid` directly in one of the REMOVABLE directories
    (root daemons remove only what belongs to the job's user, whatever a rank has mapped or a watcher
    reported). Looked up and unlinked relative to the directory itself: a path through a directory of
    the user's, swapped for a link between the check and the unlink, cannot make root unlink a file of
    the same name elsewhere."""
    folder, name = os.path.split(path)
    prefix = REMOVABLE.get(folder)
    if prefix is None or not name.startswith(prefix) or name in ("", ".", ".."):
        return False
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        st = os.lstat(name, dir_fd=dfd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            os.unlink(name, dir_fd=dfd)
            return True
    except OSError:
        pass
    finally:
        os.close(dfd)
    return False


def remove_leftovers(segments: set[str]) -> list[str]:
    """Unlink those of `segments` that still exist (call once the job's processes are gone)."""
    removed = []
    for path in sorted(segments):
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def reported_segment(suffix: bytes) -> str | None:
    """The MPICH segment a rank reported in its slot (`RankEntry.mpich_shm`), as a path; None if the
    slot holds none or anything but a plain name (it is written by the job's user: no '/', no '..')."""
    name = suffix.split(b"\0", 1)[0]
    return MPICH_PREFIX + name.decode("ascii") if re.fullmatch(rb"[A-Za-z0-9_-]+", name) else None
