"""Test-only fault injection for the daemons' fault boundaries, off unless the daemon's environment sets
its variable: VMSCHED_CPUMANAGER_FAULTS="handler=OP[,OP...];quantum=N[,N...]" (those request handlers
and those quanta raise) and VMSCHED_LAUNCHER_FAULTS="handler=OP[,OP...];pass=N[,N...]" (those handlers
and those scheduling passes raise; "start=STEP[,STEP...]": the first job start that reaches each of those
steps of `vmsched.launcher.lifecycle.START_STEPS` fails there). The daemons must log each failure and go on
(docs/security.md); a failed start leaves nothing of the job running."""

from __future__ import annotations

from dataclasses import dataclass


class InjectedFault(RuntimeError):
    """Raised where `Faults` says."""


@dataclass(frozen=True)
class Faults:
    handlers: frozenset[str] = frozenset()
    steps: frozenset[int] = frozenset()  # quanta of the CPU manager, scheduling passes of the launcher
    start: frozenset[str] = frozenset()  # steps of a job start (the launcher)


def parse_faults(spec: str | None, variable: str, step: str, start_steps: tuple[str, ...] = ()) -> Faults:
    """The value of `variable`; `step` names the numbered loop ("quantum", "pass"); `start_steps`: the
    steps of a start that "start=" may name. ValueError with a clear message when it is malformed."""
    handlers: set[str] = set()
    steps: set[int] = set()
    start: set[str] = set()
    for part in filter(None, (p.strip() for p in (spec or "").split(";"))):
        key, _, values = part.partition("=")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if key.strip() == "handler" and items:
            handlers.update(items)
        elif key.strip() == step and items and all(v.isdigit() for v in items):
            steps.update(int(v) for v in items)
        elif key.strip() == "start" and start_steps and items and set(items) <= set(start_steps):
            start.update(items)
        else:
            also = f" or start={'|'.join(start_steps)},..." if start_steps else ""
            raise ValueError(f"{variable}: cannot parse {part!r} (want handler=OP,... or {step}=N,...{also})")
    return Faults(frozenset(handlers), frozenset(steps), frozenset(start))
