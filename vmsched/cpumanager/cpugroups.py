"""One CPU group per job: the ranks of a job share one task group of the kernel's CPU scheduler.

Why. Under `mpiexec` every rank is a session of its own, and with the kernel's autogroups
(`/proc/sys/kernel/sched_autogroup_enabled`) every session in the root CPU cgroup is scheduled as a
group of its own. The ranks that share a CPU of a folded job then sit in separate run queues of one
task each, and `sched_yield` - which the runtime's two-phase waiting and MPICH's progress loop use to
pass the CPU on - only moves a rank back within its own run queue: the kernel often hands the CPU back
to the rank that yielded, and a rank that yields keeps its full share against a sibling that computes.
Put into one cgroup of the CPU controller, the ranks of a job are one run queue, as the thesis's model
of a job's partition has them: 4 ranks of an all-to-all on one CPU ran 0.78 s instead of 0.91 s, random
pairs beside a compute job 0.49 s instead of 0.66 s (vmsched/vmruntime/README.md).

Only ranks that the kernel schedules in the root task group are moved: a rank that already runs in a
CPU cgroup of someone else's (a Slurm step's, a systemd unit's with CPU accounting) is grouped already,
and taking it out would break that manager's accounting. On cgroup v2 only a rank in the root cgroup
itself is moved (a v2 move takes a process out of its memory and pids groups as well).

Off by default ([cpumanager] job_cpu_groups): on a 2-CPU VM (kernel 6.18, cgroup v1, autogroups on) a
process outside a grouped job that spans the node waited up to seconds for a CPU, where beside the same
job ungrouped it waited at most some 30 ms (bench/cpu_groups.py --cpus 2; the runtime's README).

The parsing is pure (`find_hierarchy`, `cpu_group_of`); `CpuGroups` is the thin shell that the CPU
manager calls. Written here rather than taken from a library: the few cgroup libraries on PyPI wrap
systemd's D-Bus API or cgroup v1 only, and the manager needs four file operations.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("vm-cpumanager")

MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Hierarchy:
    """The cgroup hierarchy that holds the CPU controller, as mounted here."""

    mount: Path  # where it is mounted
    version: int  # 1: a cgroup v1 hierarchy with the cpu controller; 2: the unified hierarchy
    mount_root: str = "/"  # the hierarchy's path that is mounted there (a container sees a subtree)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def find_hierarchy(mountinfo: str, v2_has_cpu: bool = False) -> Hierarchy | None:
    """The hierarchy with the CPU controller from the text of /proc/self/mountinfo. A cgroup v1
    hierarchy with `cpu` among its options wins; else the unified (v2) one if `v2_has_cpu` (its root
    offers the cpu controller to its children, read from cgroup.subtree_control by the caller)."""
    v2 = None
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        mount, root = Path(_unescape(fields[4])), _unescape(fields[3])
        if fstype == "cgroup" and "cpu" in options:
            return Hierarchy(mount, 1, root)
        if fstype == "cgroup2" and v2 is None:
            v2 = Hierarchy(mount, 2, root)
    return v2 if v2 is not None and v2_has_cpu else None


def cpu_group_of(proc_cgroup: str, version: int) -> str | None:
    """The path of a process's group in the CPU hierarchy, from the text of /proc/PID/cgroup."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if version == 2 and hid == "0" and controllers == "":
            return path
        if version == 1 and "cpu" in controllers.split(","):
            return path
    return None


def job_group_name(job_id: int) -> str:
    return f"job-{int(job_id)}"


class CpuGroups:
    """The job groups of one CPU manager, under `<hierarchy>/<instance>/job-<id>`."""

    def __init__(self, instance: str, hierarchy: Hierarchy | None, why_not: str = "") -> None:
        self.hierarchy = hierarchy
        self.why_not = why_not
        self.base = hierarchy.mount / instance if hierarchy else None
        self._warned: set[int] = set()

    @classmethod
    def detect(cls, instance: str, enabled: bool = True) -> CpuGroups:
        """The groups of this node, or a CpuGroups that does nothing and says why."""
        if not enabled:
            return cls(instance, None, "switched off ([cpumanager] job_cpu_groups = false)")
        if os.geteuid() != 0:
            return cls(instance, None, "the CPU manager does not run as root")
        try:
            text = MOUNTINFO.read_text()
        except OSError as e:
            return cls(instance, None, f"cannot read {MOUNTINFO}: {e.strerror}")
        h = find_hierarchy(text)  # cgroup v1 with the cpu controller
        unified = None if h else find_hierarchy(text, v2_has_cpu=True)
        if unified is not None:
            try:
                if "cpu" in (unified.mount / "cgroup.subtree_control").read_text().split():
                    h = unified
            except OSError:
                pass
        if h is None:
            return cls(instance, None, "no cgroup hierarchy with the cpu controller is mounted (or, on cgroup v2, "
                                       "the root does not offer it to its children)")  # fmt: skip
        if h.mount_root != "/":
            return cls(instance, None, f"{h.mount} is a subtree ({h.mount_root}) of the hierarchy: "
                                       "this node's processes are grouped by whoever made it")  # fmt: skip
        return cls(instance, h)

    @property
    def available(self) -> bool:
        return self.base is not None

    def describe(self) -> str:
        if self.base is None:
            return f"off: {self.why_not}"
        assert self.hierarchy is not None
        return f"cgroup v{self.hierarchy.version} {self.base}"

    def has(self, job_id: int) -> bool:
        """Whether the job has a group (its ranks, or some of them, were moved into it)."""
        return self.base is not None and self._dir(job_id).is_dir()

    def _dir(self, job_id: int) -> Path:
        assert self.base is not None
        return self.base / job_group_name(job_id)

    def _procs_file(self, d: Path) -> Path:
        return d / "cgroup.procs"

    def group_of(self, pid: int) -> str | None:
        """The pid's group in the CPU hierarchy, None if it cannot be read (it exited)."""
        assert self.hierarchy is not None
        try:
            return cpu_group_of(Path(f"/proc/{int(pid)}/cgroup").read_text(), self.hierarchy.version)
        except OSError:
            return None

    def start(self, keep: set[int]) -> None:
        """Make the instance's directory; groups of jobs not in `keep` (left by a manager of this state
        directory that was killed) are emptied and removed."""
        if self.base is None:
            return
        try:
            self.base.mkdir(mode=0o755, exist_ok=True)
            if self.hierarchy is not None and self.hierarchy.version == 2:
                (self.base / "cgroup.subtree_control").write_text("+cpu")
        except OSError as e:
            self.why_not, self.base = f"cannot make {self.base}: {e.strerror}", None
            log.warning("job CPU groups off: %s", self.why_not)
            return
        for d in sorted(self.base.glob("job-*")):
            job = d.name.removeprefix("job-")
            if job.isdigit() and int(job) not in keep:
                self.remove(int(job))

    def place(self, job_id: int, pid: int) -> bool:
        """Move a verified rank of the job into the job's group if the kernel schedules it in the root
        task group (autogroups); True if it was moved."""
        if self.base is None or self.group_of(pid) != "/":
            return False
        d = self._dir(job_id)
        try:
            d.mkdir(mode=0o755, exist_ok=True)
            self._procs_file(d).write_text(str(int(pid)))
        except OSError as e:
            if e.errno != errno.ESRCH and job_id not in self._warned:  # ESRCH: it has just exited
                self._warned.add(job_id)
                log.warning("job %d: cannot move rank %d into %s: %s", job_id, pid, d, e.strerror)
            return False
        return True

    def remove(self, job_id: int) -> None:
        """Remove the job's group. Processes still in it (ranks that outlive their job, which run on as
        plain MPI) go back to the root group they came from: a process in this group is the job's by
        construction (moved here as a verified rank, or forked by one)."""
        self._warned.discard(job_id)
        if self.base is None:
            return
        d = self._dir(job_id)
        if not d.is_dir():
            return
        root = self._procs_file(self.base.parent)  # the hierarchy's root group
        for _ in range(3):  # a process may fork while it is moved out
            try:
                pids = [int(p) for p in self._procs_file(d).read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    root.write_text(str(pid))
                except OSError:
                    pass  # it exited meanwhile
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    log.warning("job %d: cannot remove %s: %s", job_id, d, e.strerror)
                    return
        log.warning("job %d: %s still has processes; left in place", job_id, d)

    def close(self) -> None:
        """Remove every job group and the instance's directory (the ranks run on in the root group)."""
        if self.base is None:
            return
        for d in sorted(self.base.glob("job-*")):
            job = d.name.removeprefix("job-")
            if job.isdigit():
                self.remove(int(job))
        try:
            self.base.rmdir()
        except OSError as e:
            if e.errno != errno.ENOENT:
                log.warning("cannot remove %s: %s", self.base, e.strerror)
