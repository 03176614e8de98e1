"""MPICH's intranode segments (/dev/shm/mpich_shm_*) are removed at MPI_Finalize; a job whose ranks
were killed leaves them behind. Whoever starts a job notes what its processes map while it runs and
removes what is left once they are all gone (the same rule as vmsched.launcher.shim)."""

from __future__ import annotations

import os

import psutil


def shm_segments(pid: int) -> set[str]:
    """POSIX shared-memory files mapped by `pid` and its descendants, never vmsched's own table.
    Reads /proc/<pid>/maps (cheap enough to call a few times a second)."""
    found: set[str] = set()
    try:
        pids = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return found
    for p in pids:
        try:
            with open(f"/proc/{p}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0 and "vmsched" not in line:
                        found.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return found


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
