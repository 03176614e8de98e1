"""Structured logs: one key=value line per event, to journald under systemd (stderr is the journal's
stream), else to the state directory's log; levels from the config."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.conftest import BIN, STARTED_INSTANCES, wait_for
from tests.launcher_harness import send_app
from vmsched.config import load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.logs import KeyValueFormatter, kv
from vmsched.protocol import DaemonUnavailable
from vmsched.vmruntime.testing import lbd_decisions


def test_key_value_lines():
    line = kv({"action": "requeue", "job": 3, "user": "alice", "reason": "window expired: requeued",
               "cpus": (0, 1), "backfilled": True, "ip": 0.0512345, "exit_code": None, "name": ""})  # fmt: skip
    assert line == 'action=requeue job=3 user=alice reason="window expired: requeued" cpus=0,1 backfilled=true ' \
                   'ip=0.0512345 name=""'  # fmt: skip
    assert kv({"msg": 'say "hi"\nbye'}) == r'msg="say \"hi\"\nbye"'  # one line, whatever the value holds
    rec = logging.LogRecord("vm-launcher", logging.WARNING, __file__, 1, "plain %s", ("text",), None)
    assert KeyValueFormatter(journald=True).format(rec) == '<4>level=warning daemon=vm-launcher msg="plain text"'
    rec.created, rec.msecs = time.mktime((2026, 12, 3, 6, 27, 56, 0, 0, -1)) + 0.042, 42.0
    assert (
        KeyValueFormatter(journald=False).format(rec)
        == '2026-12-03T06:27:56.042 level=warning daemon=vm-launcher msg="plain text"'
    )  # milliseconds: 10-ms quanta


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen]]:
    """CPU managers a test starts; stopped (by pid) if the test did not get that far."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=15)


def start_cpumanager(daemons: list[subprocess.Popen], state, **popen) -> subprocess.Popen:
    STARTED_INSTANCES.add(load_config(state_dir=state).instance)
    p = subprocess.Popen([str(BIN / "vm-cpumanager"), "--state-dir", str(state), "--cpus", "0-1"], **popen)
    daemons.append(p)
    client = CpuManagerClient(load_config(state_dir=state), timeout_s=1.0)

    def answers() -> bool:  # then its stop signals are handled: SIGTERM means an orderly stop
        assert p.poll() is None, f"vm-cpumanager exited with {p.returncode}"
        try:
            return client.call("ping")["pid"] == p.pid
        except DaemonUnavailable:
            return False

    wait_for(answers, what="the CPU manager to answer")
    client.close()
    return p


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=15) == 0


def test_to_journald_under_systemd(tmp_path, daemons):
    """systemd connects stderr to the journal and names that stream in $JOURNAL_STREAM (device:inode)."""
    state = tmp_path / "state"
    r, w = os.pipe()
    st = os.fstat(w)
    env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    p = start_cpumanager(daemons, state, env=env, stderr=w, stdout=subprocess.DEVNULL)
    os.close(w)
    stop(p)
    with os.fdopen(r) as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("<6>level=info daemon=vm-cpumanager action=ready cpus=0-1 ")
    assert lines[-1].startswith("<6>level=info daemon=vm-cpumanager action=stop ")
    assert not (state / "cpumanager.log").exists(), "under journald the log goes to the journal only"


def test_to_the_state_directory_with_configured_level(tmp_path, daemons):
    state = tmp_path / "state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    stop(start_cpumanager(daemons, state, env=env, stderr=subprocess.DEVNULL))
    first = (state / "cpumanager.log").read_text()
    assert "level=info daemon=vm-cpumanager action=ready " in first
    assert "level=info daemon=vm-cpumanager action=stop " in first
    (state / "vmsched.toml").write_text('[log]\nlevel = "WARNING"\n')
    stop(start_cpumanager(daemons, state, env=env, stderr=subprocess.DEVNULL))
    assert (state / "cpumanager.log").read_text() == first, "INFO lines written at level WARNING"


def test_job_events_name_job_user_action_reason(node_factory):
    node = node_factory("fcfs/fifo")
    job = node.submit("-n", "2", "--time", "60s", "--", *send_app(3))
    node.wait_all_done()
    log = (node.state / "launcher.log").read_text().splitlines()
    mine = [line for line in log if f" job={job} " in line + " "]
    actions = [line.split(" action=")[1].split()[0] for line in mine]
    assert actions[:1] == ["submit"] and "start" in actions and actions[-1] == "end", mine
    assert all(" user=root " in line for line in mine if "action=decision" not in line), mine
    assert 'reason="' in next(line for line in mine if "action=start" in line)
    assert "state=completed exit_code=0" in mine[-1]
    cm_log = (node.state / "cpumanager.log").read_text()
    assert f"action=admit job={job} ranks=2 " in cm_log
    # Released by whichever notices the end first: the manager (its leader exited) or the launcher.
    assert re.search(rf'action=release job={job} reason=(finished|"released by request") ', cm_log), cm_log


def test_lbd_decisions_read_the_log_files_lines():
    """The benchmarks read the detector's decisions, and when they came, from the lines the formatter writes."""
    fmt = KeyValueFormatter(journald=False)
    t0 = time.mktime((2026, 12, 3, 6, 32, 5, 0, 0, -1))

    def line(at: float, **fields: object) -> str:
        rec = logging.LogRecord("vm-cpumanager", logging.INFO, __file__, 1, "%s", (kv(fields),), None)
        rec.created, rec.msecs, rec.kv = t0 + at, round(at % 1 * 1000), True
        return fmt.format(rec)

    def decision(at: float, job: int, queue: str, why: str, quick: bool = False) -> str:
        return line(at, action="lbd_decision", job=job, cvcs=0.04, ip=0.0218, queue=queue, decision=1, why=why,
                    calls_per_s_local=0, quick=quick)  # fmt: skip

    log = "\n".join([
        line(0.857, action="admit", job=9004, ranks=4), line(0.9, action="admit", job=9005, ranks=4),
        decision(1.054, 9004, "local", "idleness"), decision(1.154, 9004, "global", "local_slower"),
        decision(1.2, 9005, "global", "idleness"), decision(1.454, 9004, "local", "idleness"),
        line(1.575, action="lbd_trial", job=9004, queue="global", kept=False),
        line(0.9, action="admit", job=9007, ranks=4), decision(1.2, 9007, "local", "idleness"),
        line(1.5, action="lbd_trial", job=9007, queue="local", placement="block", kept=True, calls_per_s_cyclic=100,
             calls_per_s_block=130, calls_per_s_first=95, segments=8),
        line(1.0, action="admit", job=9008, ranks=4), decision(1.2, 9008, "local", "idleness"),
        line(1.6, action="lbd_trial", job=9008, queue="local", placement="block", kept=True, calls_per_s_cyclic=100,
             calls_per_s_block=130, calls_per_s_first=95, segments=8),
        line(2.1, action="lbd_placement", job=9008, placement="cyclic", why="stalled_cpu", stalled="0",
             calls_per_s_cyclic=100, calls_per_s_block=130),
        decision(2.5, 9008, "global", "local_slower"),
        line(1.0, action="admit", job=9009, ranks=4), decision(1.2, 9009, "local", "idleness"),
        line(1.6, action="lbd_trial", job=9009, queue="local", placement="block", kept=False, calls_per_s_cyclic=130,
             calls_per_s_block=100, calls_per_s_first=95, segments=4),
        line(2.2, action="lbd_placement", job=9009, placement="block", why="stalled_cpu", stalled="0",
             calls_per_s_cyclic=130, calls_per_s_block=100),
        line(1.0, action="admit", job=9010, ranks=4), decision(1.1, 9010, "local", "idleness", quick=True),
        decision(1.3, 9010, "global", "local_slower"),
    ])  # fmt: skip
    assert lbd_decisions(log, 9004) == ("local (idleness, IP 2.2 %, 0.20 s) > global (local_slower, IP 2.2 %, 0.30 s)"
                                        " > local (idleness, IP 2.2 %, 0.60 s); settled 0.72 s")  # fmt: skip
    assert lbd_decisions(log, 9005) == "global (idleness, IP 2.2 %, 0.30 s); settled 0.30 s"
    assert lbd_decisions(log, 9006) == "undecided"
    # A first window that decided as a busy job's quick one (module lbd: "Quick window") says so.
    assert lbd_decisions(log, 9010) == ("local (idleness, quick window, IP 2.2 %, 0.10 s) > global (local_slower, "
                                        "IP 2.2 %, 0.30 s); settled 0.30 s")  # fmt: skip
    # A kept placement trial (module lbd: "Placement trial") shows, and moves the settling time.
    assert lbd_decisions(log, 9007) == "local (idleness, IP 2.2 %, 0.30 s) > block (0.60 s); settled 0.60 s"
    # The watch's change of placement (module lbd: "A stalled CPU moves the placement"), in the order the log
    # wrote it.
    moved = lbd_decisions(log, 9008)
    assert moved == ("local (idleness, IP 2.2 %, 0.20 s) > block (0.60 s) > r mod P (stalled_cpu, 1.10 s)"
                     " > global (local_slower, IP 2.2 %, 1.50 s); settled 1.50 s")  # fmt: skip
    # ... towards block, too (a placement trial that did not keep it before)
    to_block = lbd_decisions(log, 9009)
    assert to_block == "local (idleness, IP 2.2 %, 0.20 s) > block (stalled_cpu, 1.20 s); settled 1.20 s"
    bare = "\n".join(x.split(" ", 1)[1] for x in log.splitlines())  # a journal's lines: no time stamps
    assert lbd_decisions(bare, 9005) == "global (idleness, IP 2.2 %)"
    assert lbd_decisions(bare, 9008) == ("local (idleness, IP 2.2 %) > block > r mod P (stalled_cpu)"
                                         " > global (local_slower, IP 2.2 %)")  # fmt: skip
