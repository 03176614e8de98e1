"""A real node for launcher tests: CPU manager + launcher daemons on CPUs 0-1, and the user CLI."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BIN, CpuManagerProcess, wait_for
from vmsched.config import load_config
from vmsched.launcher.acct import acct_row
from vmsched.protocol import Client, DaemonUnavailable


class Node:
    """`bin_dir`/`base_env`: run the daemons and the CLI of another installation (a wheel in a fresh venv)."""

    def __init__(self, policy: str, extra_config: str = "", *, cpus: str = "0-1", bin_dir: Path = BIN,
                 base_env: dict[str, str] | None = None) -> None:  # fmt: skip
        # World-reachable (not pytest's 0700 tmp) so that a second user can use the socket.
        self.root = Path(tempfile.mkdtemp(prefix="vmsched-node-"))
        self.root.chmod(0o755)
        self.state = self.root / "state"
        self.state.mkdir()
        (self.state / "vmsched.toml").write_text(
            f'[launcher]\npolicy = "{policy}"\noverrun = "keep"\nsample_ms = 50.0\n{extra_config}'
        )
        self.work = self.root / "work"
        self.work.mkdir()
        self.work.chmod(0o1777)
        self.cfg = load_config(state_dir=self.state)
        self.bin = bin_dir
        self.env = {**(os.environ if base_env is None else base_env), "VMSCHED_STATE_DIR": str(self.state)}
        self.cm = CpuManagerProcess(self.state, cpus, bin_dir=bin_dir, env=self.env, cwd=self.work)
        self.launcher: subprocess.Popen | None = None

    def start(self) -> Node:
        self.cm.start()
        self.start_launcher()
        return self

    def start_launcher(self) -> None:
        self.launcher = subprocess.Popen([str(self.bin / "vm-launcher")], env=self.env, cwd=self.work,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

        def up() -> bool:
            if self.launcher.poll() is not None:
                pytest.fail(f"vm-launcher exited with {self.launcher.returncode}")
            try:
                self.call("ping", timeout_s=1.0)
            except DaemonUnavailable:  # no socket yet, or not answering yet
                return False
            return True

        wait_for(up, timeout=30, interval=0.05, what="the launcher to answer")

    def cli(self, *argv: str, check: bool = True, user: int | None = None) -> subprocess.CompletedProcess:
        """Run a command of the CLI; as `user` (uid) with that user's own group, like a login would."""
        as_user = {} if user is None else {"user": user, "group": pwd.getpwuid(user).pw_gid, "extra_groups": []}
        r = subprocess.run([str(self.bin / argv[0]), *argv[1:]], env=self.env, cwd=self.work, capture_output=True,
                           text=True, timeout=60, **as_user)  # fmt: skip
        if check and r.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {r.returncode}: {r.stderr}")
        return r

    def submit(self, *args: str, user: int | None = None) -> int:
        r = self.cli("vmsubmit", "--json", *args, user=user)
        return json.loads(r.stdout)["job"]

    def call(self, op: str, timeout_s: float = 10.0, **args: Any) -> dict[str, Any]:
        """One request on the launcher's socket from this process, as root: the reply as `vmq --json`
        prints it. Waits poll with this: a `vmq` process per poll (0.3-0.5 s of CPU on a slow node, every
        0.1-0.2 s) took most of a CPU from the jobs under test on this 2-CPU node. The CLI itself is what
        `cli` runs, and the tests that read its output use that."""
        with Client(self.cfg.launcher_socket, timeout_s=timeout_s, what="launcher") as c:
            reply = c.call(op, **args)
        return {k: v for k, v in reply.items() if k != "ok"}

    def queue(self) -> dict[str, Any]:
        return self.call("queue")

    def job(self, job_id: int) -> dict[str, Any]:
        return self.call("job", job=job_id)

    def stored_jobs(self) -> list[dict[str, Any]]:
        """The queue's jobs as stored, without `partition`: the CPU manager's live view of a running job
        (its CPUs, queue type, LBD phase and imbalance), which comes and changes whatever the requests."""
        return [{k: v for k, v in j.items() if k != "partition"} for j in self.queue()["jobs"]]

    def acct(self) -> dict[int, dict[str, Any]]:
        """The rows of `vmacct --json` (its default limit), by job."""
        return {r["id"]: r for r in map(acct_row, self.call("acct", limit=1000)["jobs"])}

    def wait_state(self, job_id: int, states: tuple[str, ...], timeout: float = 90) -> dict[str, Any]:
        return wait_for(lambda: (j := self.job(job_id)["job"])["state"] in states and j, timeout=timeout,
                        interval=0.1, what=f"job {job_id} to reach {states}")  # fmt: skip

    def wait_all_done(self, timeout: float = 120) -> dict[int, dict[str, Any]]:
        wait_for(lambda: not self.queue()["jobs"], timeout=timeout, interval=0.2, what="every job to end")
        return self.acct()

    def stop(self) -> None:
        if self.launcher and self.launcher.poll() is None:
            self.cancel_all()
            self.launcher.send_signal(signal.SIGTERM)
            self.launcher.wait(timeout=20)
        self.cm.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def cancel_all(self) -> None:
        """Cancel every job still queued or running, and wait for them to end. A stopped launcher leaves
        its jobs running (their supervisors outlive it, for a restart to recover them), so a test that
        failed with a job running left that job's ranks running for good (eight of them once, each on a
        CPU of this machine, after a few runs of one failing test)."""
        try:
            ids = [str(j["id"]) for j in self.queue()["jobs"]]
            if ids:
                self.cli("vmcancel", *ids, check=False)
                wait_for(lambda: not self.queue()["jobs"], timeout=60, interval=0.2, what="the cancelled jobs to end")
        except (Exception, pytest.fail.Exception) as exc:  # the test's own failure is what it reports
            print(f"launcher_harness: could not cancel every job: {exc}")

    def output(self, job_id: int) -> str:
        return (self.work / f"vmsched-{job_id}.out").read_text()


SEND = ["python", "-m", "vmsched.apps.send", "--class", "S"]  # the thesis's synthetic send app, class S


def send_app(iters: int, variant: str = "0x1") -> list[str]:
    """A verified MPI job of adjustable length: the send app for `iters` iterations."""
    return [*SEND, "--iters", str(iters), "--variant", variant]


def send_for(seconds: float, variant: str = "0x1") -> list[str]:
    """The same job run for a given time, whatever this node's speed (`send --seconds`)."""
    return [*SEND, "--seconds", str(seconds), "--variant", variant]


def expiring_backfill(node: Node, head_iters: int = 10) -> tuple[int, int, int]:
    """Jobs (a, head, late) on 2 CPUs: `a` holds one CPU, `head` waits for both, `late` is backfilled
    with a 1 s estimate that it far outlives, so its window expires while `head` still waits. Both sized in
    seconds: in iterations they ran as the node's speed went (120 iterations of `late` took 2.5 s when this
    was written, 0.75-0.79 s on a faster node, where `late` ended as its window expired; 600 of `a`, 4-12 s
    once, took 31 s on this node in its slow spells, 2026-12-06, and two tests 165 s of the suite). A
    suspended `late` ends at its first iteration after its resume (its seconds are past); a requeued one
    runs its 4 s afresh."""
    a = node.submit("-n", "1", "--time", "20s", "--", *send_for(6))  # past late's window and its suspension
    node.wait_state(a, ("running",))
    head = node.submit("-n", "2", "--time", "30s", "--", *send_app(head_iters))
    late = node.submit("-n", "1", "--time", "1s", "--", *send_for(4))
    return a, head, late


def vmapp_result(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.startswith("VMAPP ")]
    assert len(lines) == 1, f"expected one result line, got: {text[-2000:]}"
    return json.loads(lines[0][6:])


def starts(acct: dict[int, dict[str, Any]]) -> dict[int, float]:
    return {j: r["start_time"] for j, r in acct.items()}


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))
