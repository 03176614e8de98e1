"""Free CPUs over time, from running jobs' estimated ends plus reservations (for backfilling).

A step function kept as sorted breakpoints: `free[i]` CPUs from `times[i]` up to `times[i + 1]`; the last
step lasts forever. CPUs are counted as the CPU manager admits jobs: a running job holds its minimum
partition ceil(N / max MPL), since the CPU manager shrinks running jobs down to it to admit a new one.
Every operation is one pass over the breakpoints, so a conservative plan of Q jobs costs O(Q * P).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain
from operator import itemgetter

_CPUS = itemgetter(1)


class FreeProfile:
    """Free CPUs from `now` on; intervals are half-open [start, end)."""

    def __init__(self, now: float, free_now: int, releases: Iterable[tuple[float, int]] = ()) -> None:
        rel = sorted(filter(_CPUS, releases))
        ends, cpus = zip(*rel, strict=True) if rel else ((), ())
        self._build(now, free_now, ends, cpus)

    @classmethod
    def of_sorted(cls, now: float, free_now: int, ends: Sequence[float], cpus: Sequence[int]) -> FreeProfile:
        """The profile of releases already sorted by time, each of at least one CPU (running jobs)."""
        out = cls.__new__(cls)
        out._build(now, free_now, ends, cpus)
        return out

    def _build(self, now: float, free_now: int, ends: Sequence[float], cpus: Sequence[int]) -> None:
        # Built from sorted releases with C-level steps (accumulate, dict), not by _add per release
        # (quadratic in running jobs) nor by a Python loop: the simulator builds one at most events.
        self.now = now
        times, free = [now], [free_now]
        if ends:
            # A job past its estimate still holds its CPUs now: expect them the instant after.
            after_now = math.nextafter(now, math.inf)
            k = bisect_left(ends, after_now)
            if k:
                ends = [after_now] * k + list(ends[k:])
            # dict keeps, for equal times, the last running total: one step per distinct time.
            steps = dict(zip(chain((now,), ends), accumulate(cpus, initial=free_now), strict=True))
            times, free = list(steps), list(steps.values())
        self._times, self._free = times, free
        self._horizon: dict[int, float] = {}  # cpus -> first time fewer are free; cleared on change

    def truncated(self, now: float) -> FreeProfile:
        """The same profile from `now` (>= self.now) on."""
        i = max(0, bisect_right(self._times, now) - 1)
        out = FreeProfile(now, self._free[i])
        out._times = [now, *self._times[i + 1 :]]
        out._free = self._free[i:]
        return out

    def _split(self, when: float) -> int:
        """Index of the step starting exactly at `when` (>= now), inserting a breakpoint if needed."""
        i = bisect_right(self._times, when) - 1
        if self._times[i] == when:
            return i
        self._times.insert(i + 1, when)
        self._free.insert(i + 1, self._free[i])
        return i + 1

    def _add(self, start: float, end: float, delta: int) -> None:
        start = max(start, self.now)  # the past is not in the profile (a slot may have begun before now)
        if delta == 0 or end <= start:
            return
        self._horizon.clear()
        i = self._split(start)
        j = len(self._times) if end == math.inf else self._split(end)
        for k in range(i, j):
            self._free[k] += delta

    def steps(self) -> list[tuple[float, int]]:
        """[(time, free from then on)], starting at now, times strictly increasing."""
        return list(zip(self._times, self._free, strict=True))

    def free_at(self, when: float) -> int:
        return self._free[max(0, bisect_right(self._times, when) - 1)]

    def min_free(self, start: float, end: float) -> int:
        """Fewest free CPUs at any time in [start, end) (at `start` alone when the interval is empty)."""
        first = max(0, bisect_right(self._times, start) - 1)
        last = max(first + 1, bisect_left(self._times, end))
        return min(self._free[first:last])

    def fits_from_now(self, cpus: int, duration: float) -> bool:
        """min_free(now, now + duration) >= cpus, answered from a per-size horizon: backfilling asks
        this for every queued job, mostly for a handful of sizes, between two changes of the profile."""
        horizon = self._horizon.get(cpus)
        if horizon is None:
            horizon = next((t for t, f in zip(self._times, self._free, strict=True) if f < cpus), math.inf)
            self._horizon[cpus] = horizon
        return horizon > self.now and self.now + duration <= horizon

    def spans(self, most: int) -> list[float]:
        """spans[c] for c in 0..most: how long from now at least c CPUs stay free (0 if they are not
        free now, inf if they stay free). One pass over the steps, for filtering many jobs at once."""
        out = [math.inf] * (most + 1)
        lowest = most + 1  # fewest free so far, capped: sizes above `most` are not asked for
        for t, f in zip(self._times, self._free, strict=True):
            if f < lowest:
                low = max(f, 0) + 1
                out[low:lowest] = [t - self.now] * (lowest - low)  # one C-level step, not a loop over sizes
                lowest = low
                if lowest <= 1:
                    break
        return out

    def earliest_start(self, cpus: int, duration: float) -> float | None:
        """Earliest time >= now at which `cpus` stay free for `duration`; None if never."""
        n = len(self._times)
        i = 0
        while i < n:
            if self._free[i] < cpus:
                i += 1
                continue
            end = self._times[i] + duration
            j = i + 1
            while j < n and self._times[j] < end and self._free[j] >= cpus:
                j += 1
            if j == n or self._times[j] >= end:
                return self._times[i]
            i = j + 1  # the step at j is too full: no start before it can work
        return None

    def reserve(self, start: float, end: float, cpus: int) -> None:
        """Take `cpus` over [start, end)."""
        self._add(start, end, -cpus)

    def release(self, start: float, end: float, cpus: int) -> None:
        """Undo reserve(start, end, cpus)."""
        self._add(start, end, cpus)


class ShadowProfile:
    """What FreeProfile answers for EASY, from [Lifk94]'s two numbers: the head's shadow time and the
    CPUs it leaves spare then.

    With nothing suspended, the profile of the running jobs only rises (they only release CPUs), and
    EASY takes one reservation, the head's [shadow, shadow + duration), then windows from now on. The
    fewest CPUs free over [now, now + d) are then those free now, or, when the interval reaches the
    shadow time, those left at the shadow time (`extra`): no later time is lower, since releases only
    add CPUs and a window from now holds CPUs over less and less of the future. So a backfilling pass
    asks in O(1) what the step function answers in O(steps), with the same answers
    (tests/test_policies_backfill.py compares them).
    """

    __slots__ = ("now", "free", "shadow", "extra", "_ends", "_cpus")

    def __init__(self, now: float, free_now: int, ends: Sequence[float], cpus: Sequence[int]) -> None:
        """`ends` and `cpus`: the running jobs' releases sorted by time, as for FreeProfile.of_sorted."""
        self.now, self.free = now, free_now
        self._ends, self._cpus = ends, cpus
        self.shadow = math.inf  # when the head's reservation starts; inf while none is taken
        self.extra: float = math.inf  # CPUs free at the shadow time, the head's taken

    def reserve_head(self, cpus: int, duration: float) -> float | None:
        """FreeProfile.earliest_start and then reserve for the head: the start of its slot, None if it
        never fits. The first time `cpus` are free is that start: they stay free, the profile only rises."""
        now, start, avail = self.now, self.now, self.free
        if avail < cpus:
            # Releases in order until `cpus` are free: a loop that stops there (the head mostly waits for
            # the first few) costs less than the running sums of them all and a search.
            ends, released, i, n = self._ends, self._cpus, 0, len(self._cpus)
            while i < n:
                avail += released[i]
                if avail >= cpus:
                    break
                i += 1
            else:
                return None
            start = ends[i]
            if start <= now:  # a job past its estimate releases its CPUs the instant after now
                start = math.nextafter(now, math.inf)
            for j in range(i + 1, n):  # every release by then counts (those at the same time)
                if ends[j] > start:
                    break
                avail += released[j]
        if duration > 0:  # as FreeProfile.reserve, an empty slot holds nothing
            self.shadow, self.extra = start, avail - cpus
        return start

    def fits_from_now(self, cpus: int, duration: float) -> bool:
        """FreeProfile.fits_from_now: `cpus` stay free over [now, now + duration)."""
        if cpus > self.free:
            return False
        # A slot from now that reaches the shadow time (or a reservation starting now) meets `extra`.
        return cpus <= self.extra or (self.now + duration <= self.shadow and self.shadow > self.now)

    def reserve(self, start: float, end: float, cpus: int) -> None:
        """Take `cpus` over [now, end) (backfilling reserves from now only)."""
        if start != self.now:
            raise ValueError("ShadowProfile only takes slots from now")
        if end > start:  # as FreeProfile.reserve, an empty slot holds nothing
            self.free -= cpus
            if end > self.shadow:
                self.extra -= cpus

    def lasting(self, most: int) -> int:
        """spans(most) in one number, for 0 <= most <= free: spans[c] is inf for c < lasting(most), and
        shadow - now from there up to `most`."""
        extra = self.extra  # an int, or inf while no reservation is taken
        if extra >= self.free:
            return most + 1
        # min(max(int(extra), 0) + 1, most + 1) without the three calls (asked at every EASY pass)
        lasting = int(extra) + 1 if extra > 0 else 1
        return lasting if lasting <= most else most + 1

    def spans(self, most: int) -> list[float]:
        """FreeProfile.spans: spans[c] for c in 0..most, how long from now at least c CPUs stay free."""
        n = most + 1
        free_now = min(max(self.free, 0) + 1, n)  # sizes below it are free now ...
        lasting = free_now if self.extra >= self.free else min(max(int(self.extra), 0) + 1, free_now)  # ... for ever
        return [math.inf] * lasting + [self.shadow - self.now] * (free_now - lasting) + [0.0] * (n - free_now)
