"""`vmcpu`: the CPU manager's admin view (CPUs, jobs, partitions, MPL, queue type, LBD figures)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from vmsched.config import ConfigError, format_cpu_list, load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.protocol import DaemonUnavailable, ProtocolError


def render(st: dict[str, Any], console: Console) -> None:
    owner = {c: j["job"] for j in st["jobs"] for c in j["cpus"]}
    console.print(
        f"CPU manager pid {st['pid']}  quantum {st['quantum_ms']} ms  quanta {st['quanta']}  "
        f"wait queue {'non-empty' if st['queue_waiting'] else 'empty'}  shm {st['shm']}"
    )
    console.print("CPUs: " + "  ".join(f"{c}:{owner.get(c, '-')}" for c in st["cpus"]))
    if "cpu_groups" in st:  # a manager from before job CPU groups does not say
        console.print(f"job CPU groups: {st['cpu_groups']}")
    t = Table("job", "ranks", "max MPL", "MPL", "CPUs", "queue", "LBD", "CVCS", "IP %", "registered", "state")
    for j in st["jobs"]:
        t.add_row(
            str(j["job"]), str(j["nranks"]), str(j["max_mpl"]), str(j["mpl"]), format_cpu_list(j["cpus"]),
            # "local, block": local queues with consecutive ranks on a CPU (a manager from before says nothing)
            j["queue"] + (", block" if j["queue"] == "local" and j.get("placement") == "block" else ""),
            j["lbd"], f"{j['cvcs']:.3f}", f"{100 * j['ip']:.1f}", str(j["registered"]),
            "suspended" if j["suspended"] else "running",
        )  # fmt: skip
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmcpu", description="Show the CPU manager's partitions")
    p.add_argument("--config")
    p.add_argument("--state-dir")
    p.add_argument("--json", action="store_true", help="print the raw status as JSON")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.state_dir)
        with CpuManagerClient(cfg) as c:
            st = c.status()
    except (ConfigError, DaemonUnavailable, ProtocolError) as e:
        print(f"vmcpu: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        render(st, Console(width=None if sys.stdout.isatty() else 200))
    return 0


if __name__ == "__main__":
    sys.exit(main())
