"""Starting and stopping a job's processes: the shim, as the submitting user, with the runtime loaded.

The thin edge of the launcher: the decisions are made elsewhere; this only spawns, signals and reads
the shim's status file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from vmsched.config import Config
from vmsched.launcher.store import JobRecord
from vmsched.vmruntime.build import library_path
from vmsched.vmruntime.vmrun import job_environment, mpiexec_command

BIN = Path(sys.executable).parent


def job_dir(cfg: Config, job_id: int) -> Path:
    return cfg.jobs_dir / str(job_id)


def status_file(cfg: Config, job_id: int) -> Path:
    return job_dir(cfg, job_id) / "status.json"


def read_status(cfg: Config, job_id: int) -> dict[str, Any] | None:
    try:
        return json.loads(status_file(cfg, job_id).read_text())
    except (OSError, ValueError):
        return None


def output_paths(job: JobRecord) -> tuple[str, str]:
    """Where the job's stdout/stderr go: as given, else <cwd>/vmsched-<id>.out (both streams)."""
    out = job.stdout or os.path.join(job.cwd, f"vmsched-{job.id}.out")
    err = job.stderr or out
    out, err = (p if os.path.isabs(p) else os.path.join(job.cwd, p) for p in (out, err))
    return out.replace("%j", str(job.id)), err.replace("%j", str(job.id))


def spawn(cfg: Config, job: JobRecord, nranks: int) -> subprocess.Popen:
    """Start the job's shim (it waits for `go`). Raises OSError when it cannot be started.

    The job runs exactly as `vmrun` runs one: the same environment and mpiexec command line, so the
    runtime is loaded into every rank and registers with the CPU manager.
    """
    d = job_dir(cfg, job.id)
    d.mkdir(parents=True, exist_ok=True)
    status_file(cfg, job.id).unlink(missing_ok=True)  # a requeued job starts afresh
    out, err = output_paths(job)
    env = job_environment(cfg, job.id, base=job.env)
    mpiexec = mpiexec_command(str(BIN / "mpiexec"), nranks, library_path(), job.command, env)
    command = [
        sys.executable, "-m", "vmsched.launcher.shim", "--status", str(status_file(cfg, job.id)),
        "--stdout", out, "--stderr", err, "--uid", str(job.uid), "--gid", str(job.gid),
        "--grace", str(cfg.jobs.kill_grace_s), "--", *mpiexec,
    ]  # fmt: skip
    # The venv's bin first, so that `mpiexec`, `python` and the console scripts are ours.
    env["PATH"] = f"{BIN}:{env.get('PATH', os.defpath)}"
    if os.geteuid() != 0 and job.uid != os.geteuid():
        raise OSError(f"the launcher runs as uid {os.geteuid()} and cannot start jobs of uid {job.uid}")
    with open(d / "shim.log", "ab") as log:
        return subprocess.Popen(
            command, cwd=job.cwd, env=env, stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True
        )


def go(proc: subprocess.Popen) -> None:
    """Let a spawned shim start the job (after the launcher has recorded it)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"g")
        proc.stdin.close()
    except BrokenPipeError:
        pass


def kill(pid: int, grace_signal: signal.Signals = signal.SIGTERM) -> None:
    """Signal the job's whole process group (shim, mpiexec, proxies, ranks); continue it first so a
    stopped job can act on the signal."""
    for sig in (signal.SIGCONT, grace_signal):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
