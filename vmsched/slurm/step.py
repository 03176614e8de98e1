"""`vmslurm-step`: the root helper the SPANK plugin runs from slurmstepd for each job step on a node.

    vmslurm-step admit --config FILE --node N --job J --step S --uid U --nranks R --leader PID [--max-mpl M]
    vmslurm-step release --config FILE --node N --job J --step S

`admit` admits the step's ranks on this node to the node's CPU manager (the job's uid, slurmstepd as
the leader: the manager then verifies every rank as running entirely as that uid and descending from
that slurmstepd, docs/security.md) and prints the environment the step's tasks need, one KEY=VALUE
per line: the runtime (LD_PRELOAD), the job's table entry, and VMSCHED_PER_NODE=1 (the runtime indexes
its slots by the rank's place among the ranks on this node). Exit 0 when admitted; otherwise one line
that says why the step runs as plain MPI, and exit EXIT_PLAIN. `release` ends the step's admission.
"""

from __future__ import annotations

import argparse
import sys

from vmsched.config import ConfigError, load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.protocol import DaemonUnavailable, ProtocolError
from vmsched.vmruntime.build import BuildError, library_path
from vmsched.vmruntime.vmrun import job_environment

EXIT_PLAIN = 3
JOB_BITS, STEP_SLOTS = 26, 32  # Slurm's default MaxJobId is < 2**26
REQUEST_TIMEOUT_S = 5.0


def vm_job_id(job: int, step: int) -> int:
    """The vmsched job id of a Slurm step on a node: unique for the steps of a job that run at once
    (up to 32) and within 2**31 - 1. A clash is refused by the manager (`already admitted`)."""
    return (job % 2**JOB_BITS) * STEP_SLOTS + step % STEP_SLOTS


def step_environment(env: dict[str, str], lib: str) -> list[str]:
    """What the plugin exports into the step (the runtime plus the job's entry in the node table)."""
    return [f"{k}={v}" for k, v in env.items()] + ["VMSCHED_PER_NODE=1", f"LD_PRELOAD={lib}"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vmslurm-step", description="vmsched's root helper for Slurm steps")
    p.add_argument("action", choices=("admit", "release"))
    p.add_argument("--config", required=True)
    p.add_argument("--node", default="this node")
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--uid", type=int)
    p.add_argument("--nranks", type=int)
    p.add_argument("--leader", type=int)
    p.add_argument("--max-mpl", type=int, default=0, help="0: the node's [slurm] max_mpl")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = f"job {args.job} step {args.step} on {args.node}"
    plain = "; it runs as plain MPI (not folded)"
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"vmsched: {name}: {e}{plain}")
        return EXIT_PLAIN
    vm_id = vm_job_id(args.job, args.step)
    try:
        with CpuManagerClient(cfg, timeout_s=REQUEST_TIMEOUT_S) as client:
            if args.action == "release":
                # Usually the manager released it already, when its ranks had all exited.
                if any(j["job"] == vm_id for j in client.status()["jobs"]):
                    client.release(vm_id)
                return 0
            if args.uid is None or args.nranks is None or args.leader is None:
                print("vmsched: admit needs --uid, --nranks and --leader")
                return 2
            lib = str(library_path())
            max_mpl = args.max_mpl or cfg.slurm.max_mpl
            client.admit(vm_id, args.nranks, max_mpl, uid=args.uid, leader_pid=args.leader, one_shot=True)
    except DaemonUnavailable as e:
        print(f"vmsched: {name}: no CPU manager ({e}){plain}")
        return EXIT_PLAIN
    except ProtocolError as e:
        if args.action == "release":
            return 0  # already released: the manager saw slurmstepd exit first
        print(f"vmsched: {name}: the CPU manager refused {args.nranks} ranks at max MPL {max_mpl}: {e}{plain}")
        return EXIT_PLAIN
    except BuildError as e:
        print(f"vmsched: {name}: cannot build the runtime library ({e}){plain}")
        return EXIT_PLAIN
    print("\n".join(step_environment(job_environment(cfg, vm_id, base={}), lib)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
