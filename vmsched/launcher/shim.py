"""The job shim: the process the launcher starts for each job.

    python -m vmsched.launcher.shim --status FILE --stdout OUT --stderr ERR [--uid U --gid G] -- mpiexec ...

It waits for the launcher's go (one byte "g" on stdin) before it starts anything, so a launcher that
dies between spawning the shim and recording it can never leave a job running twice: without the go
(EOF) the shim exits and writes that it never started. Then it runs the command in its own process
group, forwards SIGTERM/SIGINT, and writes the exit status to FILE (atomically), which the launcher
reads even if it was restarted meanwhile and is no longer the shim's parent.

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

from vmsched.vmruntime.shmclean import remove_leftovers, shm_segments

# How often the job's /dev/shm mappings are noted: often at first (a job may be killed within a second
# of its start, and MPICH maps its segment in MPI_Init), then rarely.
SHM_SCAN_FAST_S, SHM_SCAN_SLOW_S, SHM_FAST_FOR_S = 0.1, 2.0, 5.0


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
    as_user: dict[str, object] = {}
    if args.uid is not None and args.uid != os.geteuid():
        as_user = {"user": args.uid, "group": args.gid, "extra_groups": []}
    try:
        child = subprocess.Popen(wrapper, stdin=subprocess.DEVNULL, env=env, **as_user)  # type: ignore[arg-type]
    except OSError as e:
        write_status(args.status, started=True, exit_code=127, start_time=start, end_time=time.time(), error=str(e))
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    segments: set[str] = set()
    while True:
        try:
            fast = time.time() - start < SHM_FAST_FOR_S
            rc = child.wait(timeout=SHM_SCAN_FAST_S if fast else SHM_SCAN_SLOW_S)
            break
        except subprocess.TimeoutExpired:
            segments |= shm_segments(child.pid)
    removed = remove_leftovers(segments)
    # A signal death reads as 128 + signal number, as in a shell.
    code = rc if rc >= 0 else 128 - rc
    write_status(args.status, started=True, exit_code=code, start_time=start, end_time=time.time(), removed_shm=removed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
