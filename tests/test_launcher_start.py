"""A job start is all or nothing (vmsched/launcher/lifecycle.py): a failure at each of its steps, injected
with the launcher's test-only VMSCHED_LAUNCHER_FAULTS="start=STEP", leaves the job in a stated state, no
process of it running, no admission in the CPU manager and no shared memory behind; the node goes on."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from tests.conftest import wait_for
from tests.launcher_harness import Node, send_app, vmapp_result
from vmsched.launcher.lifecycle import START_STEPS


def _admitted(node: Node) -> set[int]:
    return {j["job"] for j in json.loads(node.cli("vmcpu", "--json").stdout)["jobs"]}


def _ours(node: Node) -> set[str]:
    return {n for n in os.listdir("/dev/shm") if node.cfg.instance in n}


@pytest.mark.parametrize("step", START_STEPS)
def test_a_failure_at_each_start_step_leaves_nothing_running(step):
    node = Node("fcfs", base_env={**os.environ, "VMSCHED_LAUNCHER_FAULTS": f"start={step}"})
    try:
        node.start()
        assert node.launcher is not None
        launcher = psutil.Process(node.launcher.pid)
        shm_before = _ours(node)
        job = node.submit("-n", "2", "--time", "30s", "--", *send_app(5))
        if step == "admit":  # nothing was done (nor recorded): the job stays queued and a later pass starts it
            info = wait_for(lambda: (i := node.job(job))["job"]["state"] in ("completed", "failed") and i,
                            timeout=120, interval=0.2, what="the job to end")  # fmt: skip
            kinds = [e["kind"] for e in info["events"]]
            assert kinds.count("start") == 1 and kinds.count("end") == 1 and "start_failed" not in kinds
            failed = [ln for ln in node.cfg.launcher_log.read_text().splitlines() if "action=start_failed" in ln]
            assert len(failed) == 1 and f"job={job}" in failed[0] and "step=admit" in failed[0], failed
            assert "injected fault" in failed[0] and "now=queued" in failed[0]
            assert info["job"]["state"] == "completed" and info["job"]["end_cause"] == "completed"
            assert vmapp_result(node.output(job))["verified"]
        else:  # undone: the job failed with the step in its reason and cause start-failed, never ran
            j = node.wait_state(job, ("failed",), timeout=60)
            assert j["end_cause"] == "start-failed" and f"start failed at {step}" in j["reason"]
            assert [e["kind"] for e in node.job(job)["events"]].count("end") == 1
            assert not launcher.children(recursive=True), "a process of the failed start still runs"
            assert job not in _admitted(node)
            assert _ours(node) == shm_before, "the failed start left shared memory behind"
            assert not os.path.exists(node.work / f"vmsched-{job}.out")  # the command never ran
        assert "start_failed" in node.cfg.launcher_log.read_text()
        later = node.submit("-n", "2", "--time", "30s", "--", *send_app(5))
        done = wait_for(lambda: (a := node.acct()).get(later, {}).get("state") == "completed" and a, timeout=120,
                        interval=0.2, what="a later job to complete")  # fmt: skip
        assert done[later]["end_cause"] == "completed" and vmapp_result(node.output(later))["verified"]
        wait_for(lambda: not launcher.children(recursive=True), timeout=30, what="the later job's processes to end")
        assert node.launcher.poll() is None
    finally:
        node.stop()


def test_start_faults_name_known_steps(tmp_path):
    from vmsched.faults import parse_faults

    f = parse_faults("start=spawn,go;pass=2", "V", "pass", START_STEPS)
    assert f.start == frozenset({"spawn", "go"}) and f.steps == frozenset({2})
    with pytest.raises(ValueError, match="V: cannot parse 'start=launch'"):
        parse_faults("start=launch", "V", "pass", START_STEPS)
    with pytest.raises(ValueError, match="cannot parse 'start=spawn'"):
        parse_faults("start=spawn", "V", "quantum")  # the CPU manager has no start steps


def test_an_admission_left_by_a_launcher_that_died_mid_start_is_released():
    """The launcher dies between a start's admit and its store step (here: SIGKILLed, and the admission
    made for it): the restarted launcher releases the admission no job of its store holds, and the job,
    still queued, starts and completes."""
    from vmsched.protocol import Client

    node = Node("fcfs")
    try:
        node.start()
        with Client(node.cfg.launcher_socket, what="launcher") as c:
            c.call("pause", paused=True)
        job = node.submit("-n", "2", "--time", "30s", "--", *send_app(5))
        assert node.launcher is not None
        node.launcher.kill()
        node.launcher.wait()
        with node.cm.client() as c:
            c.admit(job, 2, 1, uid=0)  # what the dead launcher's admit step did
        assert job in _admitted(node)
        node.start_launcher()
        wait_for(lambda: job not in _admitted(node), timeout=30, interval=0.1, what="the admission to be released")
        assert node.job(job)["job"]["state"] == "queued"
        assert "admitted by a start the launcher never recorded" in node.cfg.launcher_log.read_text()
        with Client(node.cfg.launcher_socket, what="launcher") as c:
            c.call("pause", paused=False)
        done = wait_for(lambda: (a := node.acct()).get(job, {}).get("state") == "completed" and a, timeout=120,
                        interval=0.2, what="the job to complete")  # fmt: skip
        assert done[job]["end_cause"] == "completed" and vmapp_result(node.output(job))["verified"]
    finally:
        node.stop()
