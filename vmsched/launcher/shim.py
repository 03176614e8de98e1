"""The job shim: the process the launcher starts for each job.

    python -m vmsched.launcher.shim --status FILE --stdout OUT --stderr ERR [--uid U --gid G] -- mpiexec ...

It waits for the launcher's go (one byte "g" on stdin) before it starts anything, so a launcher that
dies between spawning the shim and recording it can never leave a job running twice: without the go
(EOF) the shim exits and writes that it never started. Then it runs the command in its own process
group under the one job supervisor (vmsched/vmruntime/supervisor.py, as `vmrun` does: SIGTERM/SIGINT
forwarded, the ranks killed after the grace time, the job's leftover segments removed), and writes the
exit status to FILE (atomically), which the launcher reads even if it was restarted meanwhile and is no
longer the shim's parent.

The shim keeps the launcher's privileges, so a user cannot forge the status of a job; the command
itself runs as the job's user, who also opens the output files (through a tiny sh wrapper, so that
root never opens a path a user chose).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from vmsched.vmruntime.supervisor import allow_priority_back, supervise

# SIGTERM/SIGINT end the job (after the grace time, by force); SIGUSR1 is the user's own.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def write_status(path: Path, **status: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vmsched.launcher.shim")
    ap.add_argument("--status", required=True, type=Path)
    ap.add_argument("--stdout", required=True)
    ap.add_argument("--stderr", required=True)
    ap.add_argument("--uid", type=int)
    ap.add_argument("--gid", type=int)
    ap.add_argument("--grace", type=float, default=3.0, help="[jobs] kill_grace_s")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    go = sys.stdin.buffer.read(1)
    if go != b"g":
        write_status(args.status, started=False, exit_code=None, start_time=None, end_time=time.time())
        return 0
    start = time.time()
    redirect = '>>"$VMSCHED_OUT" 2>&1' if args.stderr == args.stdout else '>>"$VMSCHED_OUT" 2>>"$VMSCHED_ERR"'
    wrapper = ["/bin/sh", "-c", f'exec "$@" {redirect}', "vmsched-job", *command]
    env = {**os.environ, "VMSCHED_OUT": args.stdout, "VMSCHED_ERR": args.stderr}
    allow_priority_back()  # as root, before the job becomes its user: its ranks inherit the limit
    as_user: dict[str, object] = {}
    if args.uid is not None and args.uid != os.geteuid():
        as_user = {"user": args.uid, "group": args.gid, "extra_groups": []}
    try:

        def begin() -> subprocess.Popen:
            return subprocess.Popen(wrapper, stdin=subprocess.DEVNULL, env=env, **as_user)  # type: ignore[arg-type]

        owner = (args.uid, args.gid if args.gid is not None else args.uid) if args.uid is not None else None
        outcome = supervise(begin, args.grace, forwarded=FORWARDED, ignored=(signal.SIGHUP,), owner=owner)
    except OSError as e:
        write_status(args.status, started=True, exit_code=127, start_time=start, end_time=time.time(), error=str(e))
        return 127
    write_status(args.status, started=True, exit_code=outcome.exit_code, start_time=start, end_time=time.time(),
                 removed_shm=outcome.removed_shm, noted_shm=outcome.noted_shm, escalated=outcome.escalated)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
