"""MPICH's intranode segments (/dev/shm/mpich_shm_*) are removed at MPI_Finalize; a job whose ranks
were killed leaves them behind. Whoever starts a job notes what its processes map while it runs and
removes what is left once they are all gone (the same rule as vmsched.launcher.shim)."""

from __future__ import annotations

import os
import re
import stat

import psutil

from vmsched.cpumanager.shm_layout import MPICH_SHM_PREFIX as MPICH_PREFIX


def mapped_segments(pid: int, prefix: str = "/dev/shm/") -> set[str]:
    """POSIX shared-memory files under `prefix` that `pid` maps, never vmsched's own (/proc/<pid>/maps)."""
    found: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                i = line.find(prefix)
                if i >= 0 and "vmsched" not in line:
                    found.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
    except OSError:
        pass
    return found


def shm_segments(pid: int) -> set[str]:
    """POSIX shared-memory files mapped by `pid` and its descendants, never vmsched's own table
    (cheap enough to call a few times a second)."""
    try:
        pids = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return set()
    return set().union(*(mapped_segments(p) for p in pids))


def remove_owned(path: str, uid: int) -> bool:
    """Unlink `path` if it is a regular file owned by `uid` (the root CPU manager removes only what
    belongs to the job's user, whatever a rank has mapped)."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            os.unlink(path)
            return True
    except OSError:
        pass
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
