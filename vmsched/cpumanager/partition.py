"""Partition arithmetic: how many CPUs each job gets and which ones (thesis eq. 3.1, §3.3.1.2).

Pure functions over plain data. The CPU-manager daemon, the launcher's policies and the simulator all
call these, so a partition decision is the same wherever it is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import ceil

from vmsched.cpumanager import shm_layout as L


class AdmissionError(ValueError):
    """The jobs' minimum partitions do not fit in the managed CPUs."""


@dataclass(frozen=True)
class JobShape:
    """What the partition functions need to know about one admitted job."""

    job_id: int
    nranks: int
    max_mpl: int
    # Its current size; 0 for a job being admitted now. Used to decide who may grow while jobs wait.
    current: int = 0


def minimum_partition(nranks: int, max_mpl: int) -> int:
    """Smallest partition a job may be folded to: ceil(N / max MPL) (thesis eq. 3.1)."""
    if nranks < 1 or max_mpl < 1:
        raise ValueError(f"nranks and max_mpl must be >= 1 (got {nranks}, {max_mpl})")
    return -(-nranks // max_mpl)  # integer ceiling: exact for any size, and cheaper than float ceil


def mpl(nranks: int, partition_size: int) -> int:
    """Multiprogramming level: how many ranks share one CPU of the partition."""
    return ceil(nranks / partition_size) if partition_size > 0 else 0


def _next_balanced(nranks: int, size: int, cap: int) -> int | None:
    """Smallest size above `size` (and <= cap) that gives every CPU the same number of ranks."""
    for candidate in range(size + 1, cap + 1):
        if nranks % candidate == 0:
            return candidate
    return None


def check_admission(jobs: Sequence[JobShape], ncpus: int) -> None:
    """Raise AdmissionError when the minimum partitions of `jobs` do not fit in `ncpus` CPUs."""
    need = sum(minimum_partition(j.nranks, j.max_mpl) for j in jobs)
    if need > ncpus:
        raise AdmissionError(f"the jobs need at least {need} CPUs, only {ncpus} are managed")


def partition_sizes(jobs: Sequence[JobShape], ncpus: int, queue_empty: bool) -> dict[int, int]:
    """Partition size per job id.

    Every job gets its minimum. Left-over CPUs go first in steps that keep an equal number of ranks
    per CPU inside a job (smallest step first, then older job = earlier in `jobs`), then by
    equipartition (one CPU at a time to the smallest partition). A job never gets more CPUs than
    ranks. While jobs wait in the queue nobody grows beyond what it has: free CPUs are kept for the
    waiting jobs, and running jobs only shrink towards their minimum when a new job needs CPUs.
    """
    check_admission(jobs, ncpus)
    sizes = {j.job_id: minimum_partition(j.nranks, j.max_mpl) for j in jobs}
    caps = {j.job_id: j.nranks if queue_empty else min(j.nranks, max(sizes[j.job_id], j.current)) for j in jobs}
    order = {j.job_id: i for i, j in enumerate(jobs)}
    ranks = {j.job_id: j.nranks for j in jobs}
    left = ncpus - sum(sizes.values())

    # Phase 1: balanced steps (equal ranks per CPU within a job).
    while left > 0:
        steps = []
        for jid, size in sizes.items():
            nxt = _next_balanced(ranks[jid], size, caps[jid])
            if nxt is not None and nxt - size <= left:
                steps.append((nxt - size, order[jid], jid, nxt))
        if not steps:
            break
        delta, _, jid, nxt = min(steps)
        sizes[jid] = nxt
        left -= delta

    # Phase 2: equipartition of what is still free. With a non-empty queue the caps stop any growth
    # beyond a job's current size, so this only restores shrunk jobs up to what they had.
    while left > 0:
        growable = [(sizes[jid], order[jid], jid) for jid in sizes if sizes[jid] < caps[jid]]
        if not growable:
            break
        _, _, jid = min(growable)
        sizes[jid] += 1
        left -= 1
    return sizes


def assign_cpus(
    sizes: Mapping[int, int],
    current: Mapping[int, Sequence[int]],
    cpus: Sequence[int],
    order: Sequence[int] | None = None,
) -> dict[int, tuple[int, ...]]:
    """Choose the CPUs of each partition, moving as few CPUs as possible.

    A job whose size does not change keeps exactly its CPUs (and their order, which fixes the
    rank-to-CPU mapping of local queues). A shrinking job keeps the first CPUs of its list; a growing
    job keeps all of its CPUs and takes free ones, lowest id first. `order` gives the order in which
    growing/new jobs pick (default: ascending job id).
    """
    managed = set(cpus)
    if sum(sizes.values()) > len(managed):
        raise AdmissionError(f"partitions need {sum(sizes.values())} CPUs, only {len(managed)} managed")
    result: dict[int, tuple[int, ...]] = {}
    taken: set[int] = set()
    for jid, size in sizes.items():
        # Drop CPUs no longer managed or already claimed (a corrupt or stale table must not give one
        # CPU to two jobs).
        keep: list[int] = []
        for c in current.get(jid, ()):
            if c in managed and c not in taken and c not in keep:
                keep.append(c)
        keep = keep[:size]
        result[jid] = tuple(keep)
        taken.update(keep)
    free = sorted(managed - taken)
    for jid in order if order is not None else sorted(sizes):
        need = sizes[jid] - len(result[jid])
        if need > 0:
            result[jid] = result[jid] + tuple(free[:need])
            free = free[need:]
    return result


def home_cpu(rank: int, nranks: int, ncpus: int, placement: int = L.PLACE_CYCLIC) -> int:
    """Index in the partition of the local queue (CPU) of `rank` of `nranks` on `ncpus` CPUs: rank mod P
    (cyclic, thesis fig. 3.9), or rank * P / N (block: ranks next in order share a CPU, and each CPU
    gets floor or ceil of N / P of them). libvmrt.c's home_of() is the same rule."""
    if placement == L.PLACE_BLOCK and 0 <= rank < nranks:
        return rank * ncpus // nranks
    return rank % ncpus


def rank_cpus(rank: int, partition: Sequence[int], local_queues: bool, nranks: int = 0,
              placement: int = L.PLACE_CYCLIC) -> tuple[int, ...]:  # fmt: skip
    """CPUs a rank may run on: its own CPU (its local queue: `home_cpu`) or the whole partition."""
    if not partition:
        return ()
    if local_queues:
        return (partition[home_cpu(rank, nranks, len(partition), placement)],)
    return tuple(partition)


def plan_partitions(
    jobs: Sequence[JobShape],
    current: Mapping[int, Sequence[int]],
    cpus: Sequence[int],
    queue_empty: bool,
) -> dict[int, tuple[int, ...]]:
    """Sizes and CPU sets in one call: what the daemon applies every time something changes."""
    sizes = partition_sizes(jobs, len(cpus), queue_empty)
    return assign_cpus(sizes, current, cpus, order=[j.job_id for j in jobs])
