"""The applications workloads are built from, as command strings and nominal figures.

The programs live in ``vmsched/apps/`` (``python -m vmsched.apps.<name> --class X``); this module only
names them, it never imports them. ``t1`` is the thesis's T1_i of eq. 3.2: the application's sequential work, here in
CPU-seconds on this machine. The figures are nominal, taken from the targets of the apps suite (4 ranks
on 2 CPUs: class S about 1 s, W about 10 s, A about 60 s of wall time, i.e. about 2, 20 and 120
CPU-seconds); replace them with measured ones (``vmworkload generate --t1 cg.A=131``) once
``vmsched/apps/README.md`` has its table.

Job class follows the thesis's rule (long: sequential run time > 30 min, short: < 10 min) scaled to this
machine: class A is long, S and W are short.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.params import AllowedCounts, Application, JobClass

Communication = Literal["low", "medium", "high"]

NOMINAL_T1 = {"S": 2.0, "W": 20.0, "A": 120.0}
CLASS_OF_SIZE: dict[str, JobClass] = {"S": "short", "W": "short", "A": "long"}
MAX_RANKS = 4


@dataclass(frozen=True)
class AppSpec:
    """One application at one problem class (``cg.A``; ``send.W.50x6`` adds the imbalance variant)."""

    name: str
    variant: str
    command: str
    t1: float
    job_class: JobClass
    allowed: AllowedCounts
    communication: Communication
    balanced: bool = True

    @property
    def key(self) -> str:
        return f"{self.name}.{self.variant}"

    def application(self, number: int) -> Application:
        return Application(number, self.command, self.allowed, self.job_class)

    def with_t1(self, t1: float) -> AppSpec:
        if not t1 > 0:
            raise WorkloadError(f"T1 of {self.key} must be > 0 seconds, got {t1}")
        return replace(self, t1=t1)


# (communication degree, balanced, allowed counts up to 4 ranks) per application, as in vmsched/apps/registry.py
_POW2 = AllowedCounts.of([4, 2, 1])
_KERNELS: dict[str, tuple[Communication, bool, AllowedCounts]] = {
    "ep": ("low", True, AllowedCounts.any_up_to(MAX_RANKS)),
    "cg": ("high", True, _POW2),
    "mg": ("medium", True, _POW2),
    "ft": ("medium", True, _POW2),
    "sweep": ("high", True, AllowedCounts.any_up_to(MAX_RANKS)),
    "btmz": ("medium", False, AllowedCounts.of([4, 1])),
    "ring": ("high", True, AllowedCounts.any_up_to(MAX_RANKS)),
}
#: the synthetic ``send`` app's imbalance variants PCTxK: PCT % of the ranks compute K times longer
SEND_VARIANTS = ("50x2", "50x6")


def _catalog() -> dict[str, AppSpec]:
    apps: dict[str, AppSpec] = {}
    for name, (comm, balanced, allowed) in _KERNELS.items():
        for size, t1 in NOMINAL_T1.items():
            command = f"mpiexec -n N python -m vmsched.apps.{name} --class {size}"
            spec = AppSpec(name, size, command, t1, CLASS_OF_SIZE[size], allowed, comm, balanced)
            apps[spec.key] = spec
    for size, t1 in NOMINAL_T1.items():
        for variant in SEND_VARIANTS:
            command = f"mpiexec -n N python -m vmsched.apps.send --class {size} --variant {variant}"
            allowed = AllowedCounts.any_up_to(MAX_RANKS)
            spec = AppSpec("send", f"{size}.{variant}", command, t1, CLASS_OF_SIZE[size], allowed, "medium", False)
            apps[spec.key] = spec
    return apps


#: every known application, by key (``cg.A``)
APPS: dict[str, AppSpec] = _catalog()


def app(key: str) -> AppSpec:
    """The application called ``key`` (``cg.A``); WorkloadError listing the known ones otherwise."""
    try:
        return APPS[key]
    except KeyError:
        raise WorkloadError(f"unknown application {key!r}; known: {', '.join(APPS)}") from None
