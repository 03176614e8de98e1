"""Job dependencies and begin times: which queued jobs the policy may see at all (pure functions).

A job with an unmet dependency or a begin time in the future is not offered to `decide`; its pending
reason says why (`Dependency`, `DependencyNeverSatisfied`, `BeginTime`). Types, as in Slurm:
`afterok:ID[:ID...]` (start after each ended successfully) and `afterany:ID[:ID...]` (after each ended,
whatever its state); several types are joined with commas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from vmsched.launcher.lifecycle import FINISHED, JobState
from vmsched.launcher.requests import RequestError

TYPES = ("afterok", "afterany")
Dependency = tuple[str, int]

DEPENDENCY, NEVER, BEGIN = "Dependency", "DependencyNeverSatisfied", "BeginTime"


def parse_dependency(text: str) -> tuple[Dependency, ...]:
    """'afterok:3:4,afterany:5' -> (('afterok', 3), ('afterok', 4), ('afterany', 5))."""
    out: list[Dependency] = []
    for part in text.split(","):
        kind, _, ids = part.strip().partition(":")
        if kind not in TYPES or not ids:
            raise RequestError(f"bad dependency {text!r}: use afterok:ID[:ID...] or afterany:ID[:ID...]")
        for i in ids.split(":"):
            if not i.isdigit() or int(i) < 1:
                raise RequestError(f"bad dependency {text!r}: {i!r} is not a job id")
            out.append((kind, int(i)))
    return tuple(dict.fromkeys(out))


def checked_dependency(raw: object) -> tuple[Dependency, ...]:
    """A dependency list as sent over the wire ([[type, id], ...]), checked (the daemon trusts no client)."""
    if raw is None:
        return ()
    ok = isinstance(raw, list) and all(
        isinstance(d, list) and len(d) == 2 and d[0] in TYPES and isinstance(d[1], int) and not isinstance(d[1], bool)
        and d[1] >= 1 for d in raw
    )  # fmt: skip
    if not ok:
        raise RequestError("dependency must be a list of [afterok|afterany, job id]")
    return tuple(dict.fromkeys((d[0], d[1]) for d in raw))


def creates_cycle(new_id: int, deps: Iterable[Dependency], deps_of: Callable[[int], Iterable[Dependency]]) -> bool:
    """Whether a job `new_id` with these dependencies would (transitively) depend on itself."""
    seen: set[int] = set()
    todo = [j for _, j in deps]
    while todo:
        j = todo.pop()
        if j == new_id:
            return True
        if j not in seen:
            seen.add(j)
            todo.extend(i for _, i in deps_of(j))
    return False


def hold_reason(deps: Iterable[Dependency], begin_time: float | None, states: Mapping[int, str],
                now: float) -> str | None:  # fmt: skip
    """Why a queued job may not start yet, or None when it is eligible. `states` maps each dependency's
    job id to its state (a job missing from it never ends: its dependency cannot be satisfied)."""
    waiting = False
    for kind, j in deps:
        state = states.get(j)
        if state is None or (kind == "afterok" and state in FINISHED and state != JobState.COMPLETED):
            return NEVER
        if state not in FINISHED:
            waiting = True
    if waiting:
        return DEPENDENCY
    if begin_time is not None and begin_time > now:
        return BEGIN
    return None
