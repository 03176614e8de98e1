"""Load Balancing Detector (thesis §4.3.3, §4.4.3-4.4.5), as pure functions.

A job starts on a global queue. Every quantum the CPU manager feeds the per-rank context-switch
counts; the coefficient of variation (CVCS) is chaotic while the job initializes and then settles.

Stabilization rule (ours; the thesis only says "as soon as it becomes constant"): the mean count per
rank must have reached `min_switches`, and the relative change of CVCS from one quantum to the next
must stay below `stable_change` for `stable_quanta` consecutive quanta. Then the user CPU time of
every rank is sampled, again `ip_quanta` quanta later, and the idleness percentage over that window
decides: IP < threshold -> balanced -> local queues; otherwise the job stays on the global queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import sqrt

from vmsched.cpumanager.shm_layout import LBD_DECIDED, LBD_MEASURING, LBD_STABLE


@dataclass(frozen=True)
class LbdParams:
    threshold: float = 0.10
    stable_change: float = 0.05
    stable_quanta: int = 10
    ip_quanta: int = 50
    min_switches: float = 4.0


@dataclass(frozen=True)
class LbdState:
    phase: int = LBD_MEASURING
    cvcs: float | None = None
    stable_count: int = 0
    base_user: tuple[float, ...] = ()
    quanta_stable: int = 0
    ip: float | None = None
    local: bool | None = None  # the decision, once phase is LBD_DECIDED

    def wants_user_times(self, params: LbdParams) -> bool:
        """Whether the next step needs user CPU times (read from /proc only then: it is not free)."""
        return self.phase == LBD_STABLE and (not self.base_user or self.quanta_stable + 1 >= params.ip_quanta)


def cvcs(counts: Sequence[float]) -> float | None:
    """Coefficient of variation of context switches: stddev / mean (eq. 4.1); None if mean is 0."""
    # Plain float arithmetic: statistics.pstdev is exact but ~50x slower, and this runs every quantum.
    n = len(counts)
    if not n:
        return None
    mean = sum(counts) / n
    if mean <= 0:
        return None
    return sqrt(sum((c - mean) ** 2 for c in counts) / n) / mean


def idleness(user_times: Sequence[float]) -> float:
    """Idleness percentage as a fraction: sum_i(max_u - u_i) / (max_u * n) (fig. 4.3)."""
    if not user_times:
        return 0.0
    top = max(user_times)
    if top <= 0:
        return 0.0
    return sum(top - u for u in user_times) / (top * len(user_times))


def lbd_step(
    state: LbdState,
    switches: Sequence[float],
    user_times: Sequence[float] | None,
    params: LbdParams,
) -> LbdState:
    """Advance the detector by one quantum."""
    if state.phase == LBD_DECIDED:
        return state
    if state.phase == LBD_MEASURING:
        value = cvcs(switches)
        if value is None or sum(switches) / len(switches) < params.min_switches:
            return replace(state, cvcs=value, stable_count=0)
        prev = state.cvcs
        steady = prev is not None and abs(value - prev) <= params.stable_change * max(prev, 1e-9)
        count = state.stable_count + 1 if steady else 0
        if count >= params.stable_quanta:
            return replace(state, phase=LBD_STABLE, cvcs=value, stable_count=count)
        return replace(state, cvcs=value, stable_count=count)
    # LBD_STABLE: take the baseline, then the sample that closes the window.
    if user_times is None:
        return replace(state, quanta_stable=state.quanta_stable + 1)
    if not state.base_user or len(state.base_user) != len(user_times):
        return replace(state, base_user=tuple(user_times), quanta_stable=0)
    quanta = state.quanta_stable + 1
    if quanta < params.ip_quanta:
        return replace(state, quanta_stable=quanta)
    used = [max(0.0, u - b) for u, b in zip(user_times, state.base_user, strict=True)]
    ip = idleness(used)
    return replace(state, phase=LBD_DECIDED, quanta_stable=quanta, ip=ip, local=ip < params.threshold)
