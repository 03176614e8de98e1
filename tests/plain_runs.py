"""The apps under plain `mpiexec` (no runtime, no manager), each run made once per test session: the
reference results that the app tests and the runtime's tests compare checksums with. The runs are
deterministic and a checksum does not depend on the rank count (tests/test_apps.py checks both), so one
reference run serves every module (each used to make its own: some 20 runs of class S, 30-40 s of the
suite on a slow node)."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.conftest import BIN, REPO
from vmsched.apps import registry
from vmsched.apps.result import parse_result

MPIEXEC = BIN / "mpiexec"
RUN_TIMEOUT = 60

_results: dict[tuple[object, ...], dict[str, Any]] = {}


def mpirun(
    n: int, argv: list[str], timeout: float = RUN_TIMEOUT, cpus: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`cpus`: every rank on these CPUs (taskset), not wherever the kernel puts it."""
    pin = ["taskset", "-c", cpus] if cpus else []
    return subprocess.run([*pin, str(MPIEXEC), "-n", str(n), *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def run_app(app: str, n: int, cls: str = "S", cpus: str | None = None, **opts: object) -> dict[str, Any]:
    """Run and check one app on `n` ranks (on `cpus`, where given); a run already made in this session is
    reused."""
    key = (app, n, cls, cpus, *sorted(opts.items()))
    if key not in _results:
        _results[key] = _run_app(app, n, cls, cpus, **opts)
    return _results[key]


def _run_app(app: str, n: int, cls: str, cpus: str | None, **opts: object) -> dict[str, Any]:
    proc = mpirun(n, registry.command(app, cls, **opts), cpus=cpus)
    assert proc.returncode == 0, f"{app} n={n} rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    result = parse_result(proc.stdout)
    assert (result["app"], result["class"], result["ranks"]) == (app, cls, n)
    assert result["verified"] is True
    assert 0.0 <= result["mpi_time"] <= result["time"] * 1.01 + 1e-3
    return result
