"""Test-only fault injection for the daemons' fault boundaries, off unless the daemon's environment sets
its variable: VMSCHED_CPUMANAGER_FAULTS="handler=OP[,OP...];quantum=N[,N...]" (those request handlers
and those quanta raise) and VMSCHED_LAUNCHER_FAULTS="handler=OP[,OP...];pass=N[,N...]" (those handlers
and those scheduling passes raise). The daemons must log each failure and go on (docs/security.md)."""

from __future__ import annotations

from dataclasses import dataclass


class InjectedFault(RuntimeError):
    """Raised where `Faults` says."""


@dataclass(frozen=True)
class Faults:
    handlers: frozenset[str] = frozenset()
    steps: frozenset[int] = frozenset()  # quanta of the CPU manager, scheduling passes of the launcher


def parse_faults(spec: str | None, variable: str, step: str) -> Faults:
    """The value of `variable`; `step` names the numbered loop ("quantum", "pass"). ValueError with a
    clear message when it is malformed."""
    handlers: set[str] = set()
    steps: set[int] = set()
    for part in filter(None, (p.strip() for p in (spec or "").split(";"))):
        key, _, values = part.partition("=")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if key.strip() == "handler" and items:
            handlers.update(items)
        elif key.strip() == step and items and all(v.isdigit() for v in items):
            steps.update(int(v) for v in items)
        else:
            raise ValueError(f"{variable}: cannot parse {part!r} (want handler=OP,... or {step}=N,...)")
    return Faults(frozenset(handlers), frozenset(steps))
