"""A signal that reaches a tool (vmsim-calibrate, a benchmark, vmreplay, vmdemo) while it starts a process
does not leave the process behind (vmsched.held_signals): plain Popen raises out of its wait for the
child's exec with the child started and no handle to it (vmsim-calibrate left a vmrun running so in CI)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import wait_for
from vmsched.held_signals import held_signals

# The child sleeps before its exec, so that the tool waits in Popen as long and the signal lands there.
TOOL = """
import signal, subprocess, time
from vmsched.vmruntime.testing import started_job, unwind_on_sigterm
unwind_on_sigterm()
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as at a terminal (not ignored, as under nohup)
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # (a job left behind holds no pipe of ours)
with started_job(["sleep", "60"], preexec_fn=lambda: time.sleep(1.5), **quiet) as proc:
    print("started", proc.pid, flush=True)
    proc.wait()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_a_job_starts_takes_the_job_with_the_tool(sig: signal.Signals) -> None:
    tool = subprocess.Popen([sys.executable, "-c", TOOL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job: list[psutil.Process] = []
    try:
        job = wait_for(lambda: psutil.Process(tool.pid).children(), timeout=30, interval=0.01, what="the forked job")
        tool.send_signal(sig)
        out, err = tool.communicate(timeout=30)
        # SIGTERM unwinds as exit status 143; Ctrl-C as Python's own KeyboardInterrupt, which ends by SIGINT.
        assert tool.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT), err
        assert "started" not in out  # the signal was raised before the block, once Popen had returned
        gone, alive = psutil.wait_procs(job, timeout=5)
        assert not alive, f"the job outlived the tool: {[(p.pid, p.cmdline()) for p in alive]}"
    finally:  # what a failure leaves
        for p in job:
            with contextlib.suppress(psutil.Error):
                p.kill()
        if tool.poll() is None:
            tool.kill()
        tool.communicate()


def test_held_signals_reach_their_handlers_in_order_when_the_block_ends() -> None:
    came: list[int] = []
    old = {s: signal.signal(s, lambda signum, _f: came.append(signum)) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with held_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # (Python runs a handler at its next instruction: they would have run by now)
            assert came == []
        assert came == [signal.SIGHUP, signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)  # the handler is back
        time.sleep(0.05)
        assert came == [signal.SIGHUP, signal.SIGTERM, signal.SIGTERM]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
