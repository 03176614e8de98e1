"""`vmdemo`: the README's demo — the whole system on this machine.

Starts the CPU manager and the launcher on embedded defaults (state in ./.vmsched-demo, SQLite, all
CPUs), submits a small mixed workload of real MPI applications (long and short, one imbalanced) with
`vmsubmit`, shows the queue and the partitions changing live, and ends with a per-job table and a PNG
of the CPU partitions over time. Every job's result is verified.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from vmsched.apps.result import parse_result
from vmsched.config import format_cpu_list, load_config
from vmsched.held_signals import unwind_on_sigterm
from vmsched.launcher.history import partition_segments
from vmsched.launcher.replay import cancel_all, start_daemon
from vmsched.protocol import Client, DaemonUnavailable
from vmsched.tables import Column, fitted_table
from vmsched.workloads.plots import plot_partitions, plot_utilization

BIN = Path(sys.executable).parent


def app(name: str) -> list[str]:
    return ["python", "-m", f"vmsched.apps.{name}"]


def workload(ncpus: int) -> list[tuple[float, list[str]]]:
    """(seconds after start, vmsubmit arguments): long and short jobs, high and low communication,
    one imbalanced (send.50x6), sized for a few CPUs."""
    big, small = 2 * ncpus, max(1, ncpus // 2)
    return [
        (0.0, ["-n", str(big), "--class", "long", "--time", "3m", "-J", "cg.W", "--", *app("cg"), "-c", "W"]),
        (1.0, ["-n", str(small), "--class", "short", "--time", "30s", "-J", "ep.S", "--", *app("ep"), "-c", "S"]),
        (2.0, ["-n", str(big), "--class", "long", "--time", "3m", "-J", "send.50x6", "--", *app("send"),
               "-c", "W", "--variant", "50x6"]),
        (4.0, ["-n", str(small), "--class", "short", "--time", "30s", "-J", "mg.S", "--", *app("mg"), "-c", "S"]),
        (6.0, ["-n", str(small), "--class", "short", "--time", "30s", "-J", "sweep.S", "--", *app("sweep"),
               "-c", "S"]),
        (8.0, ["-n", str(big), "--class", "long", "--time", "3m", "-J", "ft.W", "--", *app("ft"), "-c", "W"]),
    ]  # fmt: skip


class Demo:
    def __init__(self, state: Path, policy: str) -> None:
        self.state = state
        self.work = state / "work"
        self.cfg = load_config(state_dir=state)
        self.env = {**os.environ, "VMSCHED_STATE_DIR": str(state), "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
        self.policy = policy
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.state / "daemons.out", "ab")  # noqa: SIM115 - lives as long as the daemons
        start_daemon(self.procs, [str(BIN / "vm-cpumanager")], self.env, log)
        self._wait(Client(self.cfg.cpumanager_socket), "CPU manager")
        start_daemon(self.procs, [str(BIN / "vm-launcher"), "--policy", self.policy], self.env, log)
        self._wait(Client(self.cfg.launcher_socket), "launcher")

    def _wait(self, c: Client, what: str) -> None:
        for _ in range(600):
            if any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"the {what} exited; see {self.state / 'daemons.out'}")
            try:
                c.call("ping")
                return
            except DaemonUnavailable:
                time.sleep(0.05)
        raise SystemExit(f"the {what} did not start")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)

    def cli(self, *argv: str) -> Any:
        r = subprocess.run([str(BIN / argv[0]), "--json", *argv[1:]], env=self.env, cwd=self.work, check=True,
                           capture_output=True, text=True)  # fmt: skip
        return json.loads(r.stdout)


def live_view(queue: dict[str, Any], cpu: dict[str, Any], elapsed: float) -> Group:
    owner = {c: j["job"] for j in cpu["jobs"] for c in j["cpus"]}
    cpus = "  ".join(f"CPU{c}:[bold]{owner.get(c, '-')}[/]" for c in cpu["cpus"])
    t = Table("job", "name", "state", "ranks", "CPUs", "MPL", "queue", "LBD", title=f"t = {elapsed:5.1f} s")
    parts = {j["job"]: j for j in cpu["jobs"]}
    for j in queue["jobs"]:
        p = parts.get(j["id"])
        t.add_row(str(j["id"]), j["name"], j["state"], str(j["nranks"] or j["procs"][0]),
                  format_cpu_list(p["cpus"]) if p else "-", str(p["mpl"]) if p else "-",
                  p["queue"] if p else "-", f"{p['lbd']} IP={100 * p['ip']:.0f}%" if p else "-")  # fmt: skip
    return Group(f"policy {queue['policy']}   {cpus}", t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vmdemo", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", default=".vmsched-demo", help="local state directory (default ./.vmsched-demo)")
    ap.add_argument("--policy", default="fjt+easy:malleable/fifo", help="launcher policy (default %(default)s)")
    args = ap.parse_args(argv)
    unwind_on_sigterm()  # by default a SIGTERM would end the demo alone and leave its daemons running
    console = Console()
    state = Path(args.state_dir).resolve()
    shutil.rmtree(state, ignore_errors=True)  # each demo starts from an empty queue
    state.mkdir(parents=True)
    ncpus = len(os.sched_getaffinity(0))
    demo = Demo(state, args.policy)
    console.print(f"[bold]vmsched demo[/]: {ncpus} CPUs, state in {state}")
    try:
        demo.start()
        cpu_client, launcher = Client(demo.cfg.cpumanager_socket), Client(demo.cfg.launcher_socket)
        plan = workload(ncpus)
        t0 = time.time()
        submitted: list[int] = []
        with Live(console=console, refresh_per_second=4) as live:
            while True:
                now = time.time() - t0
                while len(submitted) < len(plan) and plan[len(submitted)][0] <= now:
                    submitted.append(demo.cli("vmsubmit", *plan[len(submitted)][1])["job"])
                queue, cpu = launcher.call("queue"), cpu_client.call("status")
                live.update(live_view(queue, cpu, now))
                if len(submitted) == len(plan) and not queue["jobs"]:
                    break
                if now > 600:
                    raise SystemExit("the demo's jobs did not finish in 10 minutes")
                time.sleep(0.25)
        rows = demo.cli("vmacct")
    except BaseException:  # Ctrl-C, SIGTERM or a failure: the launcher leaves running jobs running
        console.print("stopping: cancelling the demo's jobs")
        cancel_all(demo.cfg.launcher_socket, "vmdemo")
        raise
    finally:
        demo.stop()
    report(rows, demo, ncpus, console)
    return 0


def report(rows: list[dict[str, Any]], demo: Demo, ncpus: int, console: Console) -> None:
    columns = [Column("job"), Column("name", flexible=True), Column("state"), Column("ranks"), Column("wait s"),
               Column("run s"), Column("response s", drop=1), Column("MPL history", flexible=True),
               Column("queue (LBD)", flexible=True, drop=2), Column("result", flexible=True)]  # fmt: skip
    table = []
    for r in rows:
        out = demo.work / f"vmsched-{r['id']}.out"
        try:
            res = parse_result(out.read_text())
            result = f"verified {res['checksum'][:8]}" if res["verified"] else "NOT VERIFIED"
        except (OSError, ValueError):
            result = "no result"
        queues = " -> ".join(dict.fromkeys(p["queue"] for p in r["partitions"])) or "-"
        table.append([str(r["id"]), r["name"], r["state"], str(r["nranks"]), f"{r['wait']:.1f}", f"{r['run']:.1f}",
                      f"{r['response']:.1f}", r["mpl_history"], queues, result])  # fmt: skip
    console.print(
        fitted_table(columns, table, console.width, title="finished jobs", hint="a wider terminal shows them")
    )
    segments = partition_segments(rows)
    png = plot_partitions(segments, ncpus, demo.state / "partitions.png")
    util = plot_utilization(segments, ncpus, demo.state / "utilization.png")
    console.print(f"CPU partitions over time: [bold]{png}[/]   utilization: {util}")
    console.print("[green]demo finished[/]: daemons stopped, shared memory removed, no process left")


if __name__ == "__main__":
    sys.exit(main())
