"""`vmrun`: run one MPI job under the CPU manager with the runtime preloaded into every rank.

    vmrun -n 8 --max-mpl 4 [--queue lbd|local|global] [--placement auto|cyclic|block] [--heuristic sender]
          [--spin-us 0]
          [--job-id N] [--state-dir D] -- <command...>

Admits the job (vmrun's own pid is the job's leader: if vmrun dies the manager releases the job),
starts `mpiexec -n N <command>` with `LD_PRELOAD=libvmrt.so` for the ranks only and the job's
environment, and supervises it (vmsched/vmruntime/supervisor.py, as the launcher's shim does): forwards
SIGINT/SIGTERM/SIGHUP to mpiexec (and kills the job if it has not ended [jobs] kill_grace_s after the
signal, or at a second one), removes the MPICH segments a killed job leaves in /dev/shm, and exits with
mpiexec's status (128 + signal if it was killed). It releases the job at the end (also on errors).

Exit codes of vmrun itself: 125 no CPU manager / admission refused / library build failed,
127 mpiexec not found, 2 usage.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from vmsched.config import Config, ConfigError, load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.cpumanager.shm_layout import DEFAULT_HEURISTIC, HEURISTIC_NAMES, PLACEMENT_NAMES
from vmsched.protocol import DaemonUnavailable, ProtocolError
from vmsched.vmruntime.build import BuildError, library_path
from vmsched.vmruntime.supervisor import allow_priority_back, supervise

EXIT_VMRUN = 125
EXIT_NO_MPIEXEC = 127
JOB_ID_BASE = 1_000_000_000  # vmrun ids (base + pid) stay clear of the launcher's small ids
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def mpiexec_path() -> str | None:
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def job_environment(cfg: Config, job_id: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for mpiexec and the ranks: where the table is and which job they belong to."""
    env = dict(os.environ if base is None else base)
    env.update(VMSCHED_SHM=cfg.shm_name, VMSCHED_JOB=str(job_id), VMSCHED_STATE_DIR=str(cfg.state_dir))
    # One thread per rank: BLAS thread pools would fight the ranks for the partition's CPUs.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


def mpiexec_command(mpiexec: str, nranks: int, lib: Path, command: list[str], env: dict[str, str]) -> list[str]:
    """`mpiexec -n N -genv LD_PRELOAD lib ... cmd`: -genv so that only the ranks load the library."""
    preload = str(lib) + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    return [mpiexec, "-n", str(nranks), "-genv", "LD_PRELOAD", preload, *command]


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if vmrun dies, so no job outlives its vmrun."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="vmrun",
        description="Run an MPI command under the vmsched CPU manager with virtual malleability.",
        usage="vmrun -n N [--max-mpl M] [options] -- command [args...]",
    )
    p.add_argument("-n", "--nranks", type=int, required=True, help="number of ranks")
    p.add_argument("--max-mpl", type=int, default=1, help="how far the job may be folded (default 1)")
    p.add_argument("--queue", choices=("lbd", "local", "global"), help="queue type (default: manager's, lbd)")
    p.add_argument("--placement", choices=("auto", *PLACEMENT_NAMES.values()), default="auto",
                   help="which CPU of a local queue each rank is on: rank mod P (cyclic), rank * P / N "
                        "(block), or auto: cyclic, and with --queue lbd the one its trial runs faster "
                        "(default %(default)s)")  # fmt: skip
    p.add_argument("--heuristic", choices=tuple(HEURISTIC_NAMES.values()), default=DEFAULT_HEURISTIC,
                   help="next-rank heuristic of the global queue (default %(default)s)")  # fmt: skip
    p.add_argument("--spin-us", type=int, default=0, help="spin this long before blocking (default 0)")
    p.add_argument("--job-id", type=int, help=f"job id (default: {JOB_ID_BASE} + vmrun's pid)")
    p.add_argument("--state-dir", help="vmsched state directory (default: $VMSCHED_STATE_DIR)")
    p.add_argument("--config", help="vmsched config file")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the MPI program and its arguments")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no command given (put it after --)")
    for name in ("nranks", "max_mpl"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.spin_us < 0:
        p.error("--spin-us must be >= 0")
    if args.job_id is not None and not 1 <= args.job_id < 2**31:
        p.error("--job-id must be between 1 and 2^31-1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.state_dir)
    except ConfigError as e:
        print(f"vmrun: {e}", file=sys.stderr)
        return 2
    mpiexec = mpiexec_path()
    if mpiexec is None:
        print("vmrun: mpiexec not found (install the 'mpich' package)", file=sys.stderr)
        return EXIT_NO_MPIEXEC
    try:
        lib = library_path()
    except BuildError as e:
        print(f"vmrun: cannot build the runtime library: {e}", file=sys.stderr)
        return EXIT_VMRUN
    job_id = args.job_id if args.job_id is not None else JOB_ID_BASE + os.getpid()
    opts: dict[str, object] = {"heuristic": args.heuristic, "spin_us": args.spin_us, "leader_pid": os.getpid()}
    if args.queue:
        opts["queue"] = args.queue
    if args.placement != "auto":
        opts["placement"] = args.placement
    try:
        with CpuManagerClient(cfg) as client:
            client.admit(job_id, args.nranks, args.max_mpl, **opts)
    except DaemonUnavailable as e:
        print(f"vmrun: {e}; start it with `vm-cpumanager --state-dir {cfg.state_dir}`", file=sys.stderr)
        return EXIT_VMRUN
    except ProtocolError as e:
        print(f"vmrun: admission refused: {e}", file=sys.stderr)
        return EXIT_VMRUN
    try:
        return _run(cfg, job_id, args, mpiexec, lib)
    finally:
        _release(cfg, job_id)


def _run(cfg: Config, job_id: int, args: argparse.Namespace, mpiexec: str, lib: Path) -> int:
    env = job_environment(cfg, job_id)
    allow_priority_back()
    cmd = mpiexec_command(mpiexec, args.nranks, lib, args.command, env)
    try:
        # Own process group: a terminal's Ctrl-C reaches mpiexec once, through us.
        outcome = supervise(lambda: subprocess.Popen(cmd, env=env, process_group=0, preexec_fn=_die_with_parent),
                            cfg.jobs.kill_grace_s, forwarded=FORWARDED)  # fmt: skip
    except OSError as e:
        print(f"vmrun: cannot start {mpiexec}: {e}", file=sys.stderr)
        return EXIT_NO_MPIEXEC
    return outcome.exit_code


def _release(cfg: Config, job_id: int) -> None:
    try:
        with CpuManagerClient(cfg) as client:
            client.release(job_id)
    except (DaemonUnavailable, ProtocolError):
        pass  # the manager is gone, or it already released the job (it saw its leader exit)


if __name__ == "__main__":
    sys.exit(main())
