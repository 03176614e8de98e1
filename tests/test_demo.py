"""vmdemo stopped in the middle, as at a terminal (Ctrl-C to its process group) or by SIGTERM, takes its
daemons and its running jobs with it. The launcher leaves running jobs running when it stops (they outlive
a restart); before, a Ctrl-C stopped both daemons at once and the running job went on alone."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, wait_for


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "SIGTERM"])
def test_a_stopped_demo_leaves_no_daemon_job_or_segment(tmp_path: Path, sig: signal.Signals) -> None:
    state = tmp_path / "demo"
    # Its own session, as at a terminal; Ctrl-C not ignored (a shell's background jobs inherit it ignored).
    demo = subprocess.Popen([str(BIN / "vmdemo"), "--state-dir", str(state)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    tree: list[psutil.Process] = []
    try:
        # A job just started: its ranks have all their run ahead of them.
        wait_for(lambda: "action=start job=" in _text(state / "launcher.log"), timeout=120, interval=0.05,
                 what="the demo's first job to start")  # fmt: skip
        tree = wait_for(lambda: _with_ranks(demo.pid), timeout=30, interval=0.05, what="the job's ranks")
        shm = re.search(r"shm=(/vmsched\.\w+)", _text(state / "cpumanager.log"))
        if sig == signal.SIGINT:
            os.killpg(demo.pid, sig)  # what a terminal's Ctrl-C does
        else:
            demo.send_signal(sig)
        out, err = demo.communicate(timeout=90)
        left = [(p.pid, _cmdline(p)[:120]) for p in tree if _running(p)]
        assert not left, f"still running after the demo stopped: {left}"
        assert shm and not list(Path("/dev/shm").glob(shm.group(1).lstrip("/") + "*"))
        assert demo.returncode == (-signal.SIGINT if sig == signal.SIGINT else 128 + signal.SIGTERM), err[-2000:]
        assert "cancelling the demo's jobs" in out
    finally:  # what a failure leaves: SIGTERM first, so that a CPU manager left running removes its table
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
        demo.communicate()
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        for p in psutil.wait_procs(tree, timeout=10)[1]:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _with_ranks(pid: int) -> list[psutil.Process] | None:
    tree = psutil.Process(pid).children(recursive=True)
    return tree if any("vmsched.apps." in _cmdline(p) for p in tree) else None


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
