"""`vmdemo`: the README's demo. Starts a real CPU manager on all CPUs of this machine, runs two folded
jobs of real processes on it and shows their partitions shrink and grow.

Everything is real: the daemon, the shared-memory table, the processes and their CPU affinity.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from cpumanager.client import CpuManagerClient
from cpumanager.status import render
from vmsched.config import load_config
from vmsched.protocol import DaemonUnavailable

# A rank of the demo's jobs: burns CPU for a while, like a compute phase.
BURN = (
    "import time, sys\nend = time.time() + float(sys.argv[1])\nx = 0\nwhile time.time() < end:\n    x += 1\n"
)


def start_daemon(state_dir: Path, console: Console) -> subprocess.Popen:
    bin_dir = Path(sys.executable).parent
    log = open(state_dir / "demo-cpumanager.out", "w")  # noqa: SIM115 - lives as long as the daemon
    proc = subprocess.Popen(
        [str(bin_dir / "vm-cpumanager"), "--state-dir", str(state_dir)], stdout=log, stderr=log
    )
    client = CpuManagerClient(load_config(state_dir=state_dir), timeout_s=1.0)
    for _ in range(500):
        if proc.poll() is not None:
            raise SystemExit(f"vm-cpumanager exited: see {state_dir / 'demo-cpumanager.out'}")
        try:
            client.call("ping")
            break
        except DaemonUnavailable:
            time.sleep(0.02)
    client.close()
    console.print(f"[bold]CPU manager[/] pid {proc.pid} on CPUs {sorted(os.sched_getaffinity(0))}")
    return proc


def run_job(
    c: CpuManagerClient, job: int, nranks: int, max_mpl: int, seconds: float
) -> list[subprocess.Popen]:
    c.admit(job, nranks, max_mpl, queue="local")
    procs = [subprocess.Popen([sys.executable, "-c", BURN, str(seconds)]) for _ in range(nranks)]
    for rank, p in enumerate(procs):
        c.register(job, rank, p.pid)
    return procs


def show(c: CpuManagerClient, console: Console, title: str, procs: dict[int, list[subprocess.Popen]]) -> None:
    console.rule(title)
    render(c.status(), console)
    for job, ps in procs.items():
        pins = []
        for rank, p in enumerate(ps):
            try:
                pins.append(f"r{rank}:{','.join(map(str, sorted(os.sched_getaffinity(p.pid))))}")
            except ProcessLookupError:
                pins.append(f"r{rank}:-")
        console.print(f"job {job} affinity (read back from the kernel): " + " ".join(pins))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vmdemo", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--state-dir", default=".vmsched-demo", help="local state directory (default ./.vmsched-demo)"
    )
    args = ap.parse_args(argv)
    console = Console()
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    ncpus = len(os.sched_getaffinity(0))
    daemon = start_daemon(state, console)
    jobs: dict[int, list[subprocess.Popen]] = {}
    try:
        c = CpuManagerClient(load_config(state_dir=state))
        n = 2 * ncpus
        console.print(f"Job 1: {n} ranks, max MPL 4 - alone, it gets every CPU ({n // ncpus} ranks per CPU)")
        jobs[1] = run_job(c, 1, n, 4, seconds=12)
        show(c, console, "job 1 alone", jobs)
        time.sleep(2)
        console.print(f"Job 2: {n} ranks, max MPL 4 arrives - job 1 shrinks, job 2 gets the freed CPUs")
        jobs[2] = run_job(c, 2, n, 4, seconds=3)
        show(c, console, "jobs 1 and 2 share the machine", jobs)
        for p in jobs[2]:
            p.wait()
        before = c.status()["quanta"]
        for _ in range(200):  # the manager notices the exits within a quantum or two
            if set(c.partitions()) == {1}:
                break
            time.sleep(0.01)
        show(c, console, "job 2 ended - job 1 expands back", jobs)
        after = next(j for j in c.status()["jobs"] if j["job"] == 1)["changed_quantum"]
        console.print(f"expansion happened {after - before} quantum(s) after job 2's ranks exited")
        c.close()
    finally:
        for ps in jobs.values():
            for p in ps:
                if p.poll() is None:
                    p.kill()
                p.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
    console.print("[green]demo finished[/]: daemon stopped, shared memory removed, no process left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
