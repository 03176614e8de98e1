"""Soak: many short real MPI jobs through a real launcher + CPU manager, with random cancels and SIGKILLs
of each daemon (each restarted, recovering from the store / the shared table), then the checks of issue 12:

- every job ended exactly once, in a stated state with an end cause (one `end` event each, in the store);
- every completed job's result verified;
- zero leaked processes: the bench is a child subreaper, so every process the run started (the daemons,
  the shims of a killed launcher, mpiexec, ranks) stays its descendant; none may be left, none stopped;
- zero /dev/shm entries: the instance's (table, lock, per-job segments) and the MPICH segments
  (`mpich_shm_*`) that a job's supervisor saw its processes map (noted in the job's status file). New
  `mpich_shm_*` that no live process maps and no job of the soak was seen to map are counted apart
  (`unattributed_shm`): on a machine shared with other work they may be someone else's;
- zero temporary files: the daemons and jobs get a private TMPDIR, which must be empty at the end.

    python bench/soak.py [--jobs 200] [--seed 1] [--kills 2] [--cpus 0-1]

A correctness soak, not a timing: run it niced. Last line: JSON.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from vmsched.config import load_config
from vmsched.launcher.lifecycle import ACTIVE, FINISHED
from vmsched.protocol import Client, DaemonUnavailable, ProtocolError
from vmsched.vmruntime.testing import Manager

BIN = Path(sys.executable).parent
PR_SET_CHILD_SUBREAPER = 36


def job_command(rng: random.Random) -> tuple[list[str], int, int, float]:
    """A short verified app: (command, ranks, max MPL, time limit); some folded, a few past their limit."""
    ranks = rng.choice((1, 2, 2, 4, 4))
    mpl = rng.choice((2, 4)) if ranks == 4 else rng.choice((1, 2)) if ranks == 2 else 1  # 4 ranks fit folded
    r = rng.random()
    if r < 0.70:
        cmd = ["python", "-m", "vmsched.apps.send", "--class", "S", "--iters", str(rng.randint(2, 12))]
    elif r < 0.85:
        cmd = ["python", "-m", "vmsched.apps.ring", "-c", "S"]
    else:
        cmd = ["python", "-m", "vmsched.apps.ep", "-c", "S"]
    limit = 1.0 if rng.random() < 0.04 else 60.0  # a few are killed at their limit (overrun_grace_s = 1)
    if limit == 1.0:
        cmd = ["python", "-m", "vmsched.apps.ep", "-c", "W"]  # runs well past 2 s
    return cmd, ranks, mpl, limit


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.root = Path(tempfile.mkdtemp(prefix="vmsched-soak-"))
        self.state, self.work, self.tmp = self.root / "state", self.root / "work", self.root / "tmp"
        for d in (self.state, self.work, self.tmp):
            d.mkdir()
        (self.state / "vmsched.toml").write_text(
            '[launcher]\noverrun = "kill"\noverrun_grace_s = 1.0\nsample_ms = 200.0\n[jobs]\nkill_grace_s = 2.0\n'
        )
        self.cfg = load_config(state_dir=self.state)
        self.env = {**os.environ, "VMSCHED_STATE_DIR": str(self.state), "TMPDIR": str(self.tmp)}
        self.cm = Manager(self.state, args.cpus, 10.0, bin_dir=BIN, env=self.env, cwd=self.work)
        self.launcher: subprocess.Popen | None = None
        self.client = Client(self.cfg.launcher_socket, timeout_s=10.0, what="launcher")
        self.kills = {"launcher": 0, "cpumanager": 0}
        self.cancels = 0
        self.ids: list[int] = []
        self.shm_before = set(os.listdir("/dev/shm"))

    # -- the daemons -------------------------------------------------------------------------------
    def start_launcher(self) -> None:
        with open(self.root / "launcher.out", "ab") as out:
            self.launcher = subprocess.Popen([str(BIN / "vm-launcher")], env=self.env, cwd=self.work, stdout=out,
                                             stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.launcher.poll() is not None:
                raise RuntimeError(f"vm-launcher exited with {self.launcher.returncode}")
            try:
                self.call("ping")
                return
            except DaemonUnavailable:
                time.sleep(0.1)
        raise RuntimeError("vm-launcher did not answer within 60 s")

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        return self.client.call(op, **kw)

    def call_retrying(self, op: str, **kw: Any) -> dict[str, Any]:
        """Through a daemon restart: the launcher answers again within a minute."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return self.call(op, **kw)
            except DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def kill_launcher(self) -> None:
        assert self.launcher is not None
        self.launcher.send_signal(signal.SIGKILL)
        self.launcher.wait()
        self.kills["launcher"] += 1
        time.sleep(self.rng.uniform(0.2, 2.0))
        self.start_launcher()

    def kill_cpumanager(self) -> None:
        self.cm.kill()
        self.kills["cpumanager"] += 1
        time.sleep(self.rng.uniform(0.2, 2.0))
        self.cm.start(timeout=60)

    def reap_orphans(self) -> None:
        """Shims of a killed launcher are reparented to us (the subreaper): reap them when they end."""
        own = {p.pid for p in (self.launcher, self.cm.proc) if p is not None}
        for c in psutil.Process().children():
            try:
                if c.pid not in own and c.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(c.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError):
                pass

    # -- the run -----------------------------------------------------------------------------------
    def submit(self) -> int:
        cmd, ranks, mpl, limit = job_command(self.rng)
        reply = self.call_retrying(
            "submit", name=f"soak{len(self.ids)}", command=cmd, cwd=str(self.work), env=self.env, procs=[ranks],
            max_mpl=mpl, job_class=None, time_limit=limit, deadline=None, begin_time=None, dependency=None,
            stdout=None, stderr=None,
        )  # fmt: skip
        self.ids.append(reply["job"])
        return reply["job"]

    def run(self, progress: Progress) -> None:
        n = self.args.jobs
        task = progress.add_task("jobs ended", total=n)
        # When to kill each daemon: after random numbers of submissions.
        kill_at = [(self.rng.randint(n // 10, n - 1), "launcher") for _ in range(self.args.kills)]
        kill_at += [(self.rng.randint(n // 10, n - 1), "cpumanager") for _ in range(self.args.kills)]
        kill_at.sort()
        cancel_at: list[tuple[float, int]] = []
        while len(self.ids) < n or cancel_at or kill_at:
            self.reap_orphans()
            info = self.call_retrying("info")
            if len(self.ids) < n and info["queued"] < 6:  # keep a short queue: arrivals over the run
                job = self.submit()
                if self.rng.random() < 0.12:
                    cancel_at.append((time.monotonic() + self.rng.uniform(0.0, 4.0), job))
            while kill_at and kill_at[0][0] <= len(self.ids):
                _, which = kill_at.pop(0)
                time.sleep(self.rng.uniform(0.0, 1.5))  # at a random moment, not right after a submission
                self.kill_launcher() if which == "launcher" else self.kill_cpumanager()
            for t, job in [c for c in cancel_at if c[0] <= time.monotonic()]:
                cancel_at.remove((t, job))
                try:
                    self.call_retrying("cancel", job=job)
                    self.cancels += 1
                except ProtocolError:  # it ended first
                    pass
            progress.update(task, completed=self.ended())
            time.sleep(self.rng.uniform(0.05, 0.4))
        deadline = time.monotonic() + 600
        while self.active() and time.monotonic() < deadline:
            self.reap_orphans()
            progress.update(task, completed=self.ended())
            time.sleep(0.3)
        progress.update(task, completed=self.ended())

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.cfg.db_path}?mode=ro", uri=True, timeout=10)

    def ended(self) -> int:
        with self.db() as db:
            marks = ",".join("?" * len(FINISHED))
            return int(db.execute(f"SELECT COUNT(*) FROM jobs WHERE state IN ({marks})", FINISHED).fetchone()[0])

    def active(self) -> int:
        with self.db() as db:
            marks = ",".join("?" * len(ACTIVE))
            return int(db.execute(f"SELECT COUNT(*) FROM jobs WHERE state IN ({marks})", ACTIVE).fetchone()[0])

    def stop(self) -> None:
        if self.launcher is not None and self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)
            self.launcher.wait(30)
        self.cm.stop()
        self.client.close()

    # -- the checks --------------------------------------------------------------------------------
    def outcome(self) -> dict[str, Any]:
        with self.db() as db:
            jobs = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, state, end_cause FROM jobs")}
            ends = Counter(r[0] for r in db.execute("SELECT job_id FROM events WHERE kind = 'end'"))
        ended_once = sum(1 for j, (s, c) in jobs.items() if s in FINISHED and c and ends[j] == 1)
        unverified = []
        for j, (s, _) in jobs.items():
            if s == "completed":
                out = self.work / f"vmsched-{j}.out"
                lines = [ln for ln in out.read_text().splitlines() if ln.startswith("VMAPP ")] if out.exists() else []
                if len(lines) != 1 or not json.loads(lines[0][6:])["verified"]:
                    unverified.append(j)
        return {"jobs": len(jobs), "submitted": len(self.ids), "ended_once": ended_once,
                "states": dict(Counter(s for s, _ in jobs.values())),
                "end_causes": dict(Counter(c or "-" for _, c in jobs.values())),
                "unverified_completed": len(unverified), "cancel_requests": self.cancels}  # fmt: skip

    def leaks(self) -> dict[str, Any]:
        self.reap_orphans()
        left = psutil.Process().children(recursive=True)
        stopped = [p for p in left if _status(p) == psutil.STATUS_STOPPED]
        new = set(os.listdir("/dev/shm")) - self.shm_before
        mapped = _mapped_shm()
        noted = self.noted_shm()
        shm = sorted(n for n in new if self.cfg.instance in n or n in noted)
        other = sorted(n for n in new if n.startswith("mpich_shm_") and n not in mapped and n not in noted)
        tmp = sorted(os.listdir(self.tmp))
        return {"leaked_processes": len(left), "stopped_processes": len(stopped), "leaked_shm": len(shm),
                "leaked_tmp": len(tmp), "unattributed_shm": len(other),
                "_detail": {"processes": [_describe(p) for p in left], "shm": shm, "tmp": tmp,
                            "unattributed_shm": other}}  # fmt: skip

    def noted_shm(self) -> set[str]:
        """Names of the segments the soak's jobs were seen to map (their shims' status files)."""
        names: set[str] = set()
        for status in self.cfg.jobs_dir.glob("*/status.json"):
            try:
                names.update(Path(p).name for p in json.loads(status.read_text()).get("noted_shm", []))
            except (OSError, ValueError):
                continue
        return names


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.Error:
        return None


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {p.status()} {' '.join(p.cmdline())[:100]}"
    except psutil.Error:
        return str(p.pid)


def _mapped_shm() -> set[str]:
    """Names of /dev/shm files some live process maps."""
    names: set[str] = set()
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        names.add(line[i + 9 :].split()[0])
        except OSError:
            continue
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kills", type=int, default=2, help="SIGKILLs of each daemon (default 2)")
    p.add_argument("--cpus", default="0-1")
    p.add_argument("--keep", action="store_true", help="keep the state directory (for a look at the logs)")
    args = p.parse_args(argv)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    console = Console(stderr=True)
    soak = Soak(args)
    t0 = time.monotonic()
    try:
        soak.cm.start(timeout=60)
        soak.start_launcher()
        cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*cols, console=console) as progress:
            soak.run(progress)
    finally:
        soak.stop()
    duration = time.monotonic() - t0
    result = {**soak.outcome(), **soak.leaks(), "duration_s": round(duration, 1),
              "kills": soak.kills, "seed": args.seed}  # fmt: skip
    detail = result.pop("_detail")
    table = Table(title=f"soak: {result['jobs']} jobs, seed {args.seed}, {duration:.0f} s")
    table.add_column("check")
    table.add_column("value", justify="right")
    for k in ("jobs", "ended_once", "unverified_completed", "leaked_processes", "stopped_processes", "leaked_shm",
              "leaked_tmp", "unattributed_shm", "cancel_requests"):  # fmt: skip
        table.add_row(k, str(result[k]))
    table.add_row("states", ", ".join(f"{k} {v}" for k, v in sorted(result["states"].items())))
    table.add_row("end causes", ", ".join(f"{k} {v}" for k, v in sorted(result["end_causes"].items())))
    table.add_row("daemon kills", ", ".join(f"{k} {v}" for k, v in result["kills"].items()))
    console.print(table)
    if any(detail.values()):
        console.print(detail)
    leaks = ("leaked_processes", "stopped_processes", "leaked_shm", "leaked_tmp")
    ok = (result["ended_once"] == result["jobs"] == result["submitted"] and not result["unverified_completed"]
          and not any(result[k] for k in leaks))  # fmt: skip
    if args.keep or not ok:
        console.print(f"state kept in {soak.root}")
    else:
        shutil.rmtree(soak.root, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
