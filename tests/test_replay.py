"""`vmreplay` end to end: a generated workload of real MPI jobs under two policies, on private daemons."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from pathlib import Path

import psutil

from tests.conftest import BIN, vmsched_shm_entries, wait_for
from vmsched.config import load_config
from vmsched.workloads.catalog import AppSpec
from vmsched.workloads.generate import MixEntry, WorkloadSpec, generate
from vmsched.workloads.params import AllowedCounts
from vmsched.workloads.swf import read_swf

POLICIES = ("fcfs+easy:abort/fifo", "fjt+easy:malleable/fifo")


def small_workload(directory) -> int:
    """About 7 class-S jobs (about a second each) arriving over about 8 s, long and short, of all four apps
    (7 with this seed; 21 jobs over 25 s made this the suite's longest test, 98 s on a slow node)."""
    up_to_2 = AllowedCounts.of([2, 1])
    apps = [
        AppSpec("ep", "S", "mpiexec -n N python -m vmsched.apps.ep --class S", 2.0, "short", up_to_2, "low"),
        AppSpec("sweep", "S", "mpiexec -n N python -m vmsched.apps.sweep --class S", 2.0, "short", up_to_2, "high"),
        AppSpec("send", "S.50x6", "mpiexec -n N python -m vmsched.apps.send --class S --iters 20 --variant 50x6", 3.0,
                "long", up_to_2, "medium", balanced=False),
        AppSpec("cg", "S", "mpiexec -n N python -m vmsched.apps.cg --class S", 2.0, "long", up_to_2, "high"),
    ]  # fmt: skip
    spec = WorkloadSpec(cpus=2, utilization=0.8, mix=tuple(MixEntry(a, 0.25) for a in apps), duration=8, seed=1)
    w = generate(spec)
    w.write_params(directory)
    return len(w.arrivals)


def test_replay_two_policies_end_to_end(tmp_path):
    params, out = tmp_path / "workload", tmp_path / "results"
    params.mkdir()
    njobs = small_workload(params)
    assert 5 <= njobs <= 12
    argv = [str(BIN / "vmreplay"), str(params), "--private", "--time-scale", "2", "--out", str(out)]
    for p in POLICIES:
        argv += ["--policy", p]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for policy in POLICIES:
        d = out / policy.replace("+", "_").replace(":", "_").replace("/", "_")
        assert d.is_dir(), sorted(p.name for p in out.iterdir())
        log = read_swf(d / "result.swf")
        ids = [j.job_number for j in log.jobs]
        assert len(ids) == njobs and len(set(ids)) == njobs, "every job exactly once"
        report = (d / "report.md").read_text()
        assert f"{njobs} of {njobs} jobs completed with a verified result" in report
        # The node's energy over the run, from the launcher's meter (here the power model, 20 W idle and
        # 60 W busy by default): at least the idle power over the makespan, at most full power a bit longer.
        figures = dict(re.findall(r"^\|\s*([^|]+?)\s*\|\s*([\d.,]+)\s*\|$", report, re.MULTILINE))
        energy, makespan = (float(figures[k].replace(",", "")) for k in ("energy (kJ)", "makespan (s)"))
        assert 20.0 * makespan <= energy * 1000 <= 60.0 * (makespan + 10), (energy, makespan)
        for png in ("partitions.png", "utilization.png"):
            assert (d / png).stat().st_size > 1000
    comparison = (out / "comparison.md").read_text()
    assert all(p in comparison for p in POLICIES) and "energy kJ" in comparison
    assert (out / "response_by_class.png").stat().st_size > 1000
    assert (out / "relative_cdf.png").stat().st_size > 1000


def test_replay_bad_workload(tmp_path):
    (tmp_path / "template.txt").write_text("mpiexec -n N python -m vmsched.apps.ep --class S\n")
    r = subprocess.run([str(BIN / "vmreplay"), str(tmp_path), "--private"], capture_output=True, text=True)
    assert r.returncode == 1 and "allowed_procs.txt" in r.stderr
    r = subprocess.run([str(BIN / "vmreplay"), str(tmp_path), "--time-scale", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--time-scale" in r.stderr


def test_replay_stopped_by_sigterm_leaves_nothing_running(tmp_path):
    """SIGTERM in the middle of a run: the private daemons, their jobs and state directory all go."""
    params = tmp_path / "workload"
    params.mkdir()
    (params / "template.txt").write_text("mpiexec -n N python -m vmsched.apps.send --class S --iters 4000\n")
    (params / "allowed_procs.txt").write_text("2 1\n")
    (params / "job_types.txt").write_text("1\n")
    (params / "trace.swf").write_text("; MaxProcs: 2\n" + "".join(
        f"{i} {i} -1 -1 -1 -1 -1 2 300 -1 -1 -1 -1 0 -1 -1 -1 -1\n" for i in (1, 2)))  # fmt: skip
    argv = [str(BIN / "vmreplay"), str(params), "--private", "--policy", "fcfs", "--out", str(tmp_path / "out")]
    r = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        me = psutil.Process(r.pid)

        def app_running() -> list[psutil.Process]:
            procs = me.children(recursive=True)
            return procs if any("vmsched.apps.send" in " ".join(p.cmdline()) for p in procs) else []

        descendants = wait_for(app_running, timeout=60, interval=0.2, what="a job of the replay to run")
        state = next(Path(p.environ()["VMSCHED_STATE_DIR"]) for p in descendants if "vm-cpumanager" in p.cmdline()[1])
        instance = load_config(state_dir=state).instance
        r.send_signal(signal.SIGTERM)
        assert r.wait(timeout=90) == 128 + signal.SIGTERM, r.stderr.read()
        assert "stopped by SIGTERM" in r.stderr.read()
        alive = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"left running: {[p.cmdline() for p in alive]}"
        assert not state.exists()
        assert not [n for n in vmsched_shm_entries() if instance in n]
    finally:  # when it failed: stop what it left, by the pids seen under it
        for p in [r, *locals().get("descendants", [])]:
            with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
                p.send_signal(signal.SIGCONT)
                p.kill()
        r.wait()
