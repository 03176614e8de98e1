"""Job sizes: allowed rank counts, percentage offers, the run-time estimate at a size, MPL caps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from vmsched.cpumanager.partition import minimum_partition

from .config import PolicyConfig
from .snapshot import QueuedJob


class Shape(NamedTuple):
    """How a job is (to be) started: ranks and max MPL."""

    nranks: int
    max_mpl: int

    @property
    def cpus(self) -> int:
        """CPUs the job holds at least: its minimum partition (thesis eq. 3.1)."""
        n, m = self.nranks, self.max_mpl
        if n >= 1 and m >= 1:  # asked for every shape tried: minimum_partition's arithmetic without the call
            return -(-n // m)
        return minimum_partition(n, m)  # raises


def largest_allowed(procs: Sequence[int], limit: float) -> int | None:
    """Largest allowed rank count <= limit, or None."""
    return next((p for p in procs if p <= limit), None)


def allowed_up_to(procs: Sequence[int], limit: float) -> list[int]:
    """Allowed rank counts <= limit, largest first."""
    return [p for p in procs if p <= limit]


def percentage_offers(procs: Sequence[int], percentages: Sequence[float]) -> list[int]:
    """Rank counts offered to a job that does not fit at its full request, best first.

    Each percentage of the request procs[0] is rounded down to an allowed count (a rigid job therefore
    only ever gets its request), never below the smallest percentage of the request; repeats are
    dropped. Moldable-deadline-backfilling paper, §4 (offers 100/80/70/60/50/40 %).
    """
    floor = min(percentages) * procs[0] - 1e-9
    offers: list[int] = []
    for pct in percentages:
        # The small epsilon keeps 0.7 * 10 = 6.999... from rounding down to 6.
        n = largest_allowed(procs, math.floor(pct * procs[0] + 1e-9))
        if n is not None and n >= floor and n not in offers:
            offers.append(n)
    return offers


def estimate_at(job: QueuedJob, nranks: int) -> float:
    """Estimated run time with `nranks` ranks.

    Run-time model of the policies: the estimate is for procs[0] ranks and scales with perfect
    speedup to other rank counts; folding is not charged (a folded job is expected to expand again,
    and the thesis's own estimates are only classes). The wall time is from the start, whatever the
    partition does later.
    """
    return job.estimate * job.procs[0] / nranks


def mpl_cap(cfg: PolicyConfig, user_cap: int | None) -> int:
    """Highest max MPL a policy may give a job: the configured limit, lowered by the user's cap."""
    return cfg.max_mpl_limit if user_cap is None else min(cfg.max_mpl_limit, user_cap)
