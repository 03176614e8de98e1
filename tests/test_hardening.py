"""The units' hardening keeps the daemons working: both run under exactly the capabilities (and, for the
CPU manager, NoNewPrivileges) their unit files grant, via setpriv(1), and still fold, pin, stop and
continue, and cancel a job of another user. The mount-namespace settings (ProtectSystem=, ProtectHome=,
PrivateTmp=) need systemd as PID 1, which this machine lacks; systemd-analyze checks the files."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import STARTED_INSTANCES, vmsched_shm_entries, wait_for
from tests.test_launcher import as_user
from tests.test_systemd import UNITS, exec_start, run_cli, unit, unit_config
from vmsched.config import load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.protocol import Client
from vmsched.vmruntime.shmclean import HYDRA_TOPOLOGY_PREFIX, job_files, remove_leftovers, reported_segment
from vmsched.vmruntime.testing import compile_c_program, mpiexec

RING = Path(__file__).parent / "c" / "ring.c"
CAP_NUMBERS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_KILL": 5,
               "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SYS_NICE": 23}  # fmt: skip


def granted(name: str) -> list[str]:
    return unit(name)["Service"]["CapabilityBoundingSet"].split()


def sandboxed(name: str, config: Path) -> list[str]:
    """The unit's ExecStart under the unit's CapabilityBoundingSet= and NoNewPrivileges=, as systemd applies them."""
    caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in granted(name))
    argv = ["setpriv", f"--bounding-set=-all,{caps}", "--inh-caps=-all"]
    if unit(name)["Service"].get("NoNewPrivileges") == "yes":
        argv.append("--no-new-privs")
    return argv + exec_start(name, config)


def effective_caps(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)


def mpich_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("mpich_shm_")}


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """Reachable by a second user (pytest's tmp_path is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="vmsched-hardening-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_units_grant_only_a_few_capabilities():
    assert sorted(granted("vm-cpumanager.service")) == ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL",
                                                         "CAP_SYS_NICE"]  # fmt: skip
    assert sorted(granted("vm-launcher.service")) == ["CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"]
    cm = unit("vm-cpumanager.service")["Service"]
    assert cm["ProtectSystem"] == "strict" and cm["ProtectHome"] == "yes" and cm["PrivateTmp"] == "yes"
    assert "PrivateDevices" not in cm, "the ranks and the CPU manager must share /dev/shm"
    launcher = unit("vm-launcher.service")["Service"]
    assert launcher["ProtectSystem"] == "full" and "ProtectHome" not in launcher and "PrivateTmp" not in launcher
    for name in UNITS:
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(Path("systemd") / name)],
                           capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[1])  # fmt: skip
        assert r.returncode == 0 and "Overall exposure level" in r.stdout, r.stderr


def test_another_users_folded_job_under_the_units_capabilities(world_dir):
    nobody = pwd.getpwnam("nobody")
    config = unit_config(world_dir)  # local queues: each rank pinned to one CPU, unlike its inherited mask
    config.write_text(config.read_text().replace('default_queue = "lbd"', 'default_queue = "local"')
                      .replace('queue_type = "lbd"', 'queue_type = "local"')
                      .replace('policy = "fjt+easy:malleable/fifo"', 'policy = "fcfs/fifo"'))  # fmt: skip
    cfg = load_config(config)
    STARTED_INSTANCES.add(cfg.instance)
    work = world_dir / "work"
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    exe = compile_c_program(RING, world_dir)
    env = {**os.environ, "VMSCHED_CONFIG": str(config)}
    procs: list[subprocess.Popen] = []
    try:
        for name in UNITS:
            procs.append(subprocess.Popen(sandboxed(name, config), env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
            probe = ("vmcpu", "--json") if name == "vm-cpumanager.service" else ("vmq", "--json")
            wait_for(lambda p=probe: run_cli(env, world_dir, *p).returncode == 0, timeout=30, what=f"{name} up")
        for name, p in zip(UNITS, procs, strict=True):
            assert effective_caps(p.pid) == sum(1 << CAP_NUMBERS[c] for c in granted(name)), name

        def submit() -> dict:
            with Client(cfg.launcher_socket) as c:
                return c.call("submit", command=[str(exe), "100000000"], procs=[4], max_mpl=4, cwd=str(work),
                              env={"PATH": "/usr/bin:/bin"}, time_limit=300)  # fmt: skip

        mpich_before = mpich_segments()
        answer = as_user(nobody.pw_uid, nobody.pw_gid, submit)
        job = answer.get("job") or pytest.fail(f"submit as nobody: {answer}")
        client = CpuManagerClient(cfg, timeout_s=5.0)

        def view() -> dict | None:
            return next((j for j in client.status()["jobs"] if j["job"] == job and j["registered"] == 4), None)

        j = wait_for(view, timeout=60, what="nobody's 4 ranks registered")
        assert j["mpl"] == 2 and j["queue"] == "local", j
        # Pinning another user's ranks (CAP_SYS_NICE): local queues, rank r on partition[r mod P]. A rank pins
        # itself at a partition change; the manager re-applies every rank's pin once per repin period.
        for r in j["ranks"]:
            assert psutil.Process(r["pid"]).uids().real == nobody.pw_uid
            wait_for(lambda r=r: os.sched_getaffinity(r["pid"]) == {j["cpus"][r["rank"] % 2]}, timeout=10,
                     what=f"rank {r['rank']} pinned")  # fmt: skip
            os.sched_setaffinity(r["pid"], {0, 1})  # something else moved it: the CPU manager puts it back
        period = cfg.cpumanager.repin_quanta * cfg.cpumanager.quantum_ms / 1000
        for r in j["ranks"]:
            wait_for(lambda r=r: os.sched_getaffinity(r["pid"]) == {j["cpus"][r["rank"] % 2]}, timeout=5 * period,
                     what=f"the CPU manager to pin rank {r['rank']} again")  # fmt: skip
        # Stopping and continuing them (CAP_KILL).
        pids = [r["pid"] for r in j["ranks"]]
        assert client.suspend(job) == 4
        wait_for(lambda: all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in pids), what="ranks stopped")
        assert client.resume(job) == 4
        wait_for(lambda: all(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in pids), what="ranks go on")
        client.close()
        # The launcher (CAP_KILL) ends another user's job; nothing of it is left.
        assert run_cli(env, world_dir, "vmcancel", str(job)).returncode == 0
        wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), timeout=30, what="the ranks to be gone")
        wait_for(lambda: '"cancelled"' in run_cli(env, world_dir, "vmacct", "--json").stdout, what="accounted")
        # Its MPICH segment, mapped by nobody's ranks (which the launcher, without CAP_SYS_PTRACE, cannot
        # inspect), was noted by the shim's watcher and removed when the job ended.
        assert mpich_segments() - mpich_before == set()
        out = work / f"vmsched-{job}.out"
        assert out.stat().st_uid == nobody.pw_uid, "the job's user (CAP_SETUID/SETGID) creates its output"
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=15) == 0
        assert not any(cfg.instance in n for n in vmsched_shm_entries())
    finally:
        # On a failure, the job's processes (the launcher's children) too: jobs outlive a stopped launcher.
        left = [c for p in procs if p.poll() is None for c in psutil.Process(p.pid).children(recursive=True)]
        for c in left:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(psutil.NoSuchProcess):
                    c.send_signal(sig)
        psutil.wait_procs(left, timeout=10)
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=15)


def test_a_killed_step_of_another_user_leaves_no_mpich_segment_under_the_cpu_manager_unit(world_dir):
    """A Slurm step (admitted one-shot by `vmslurm-step`, docs/slurm.md) of another user killed by
    `scancel`: no `vmrun` or shim is left to remove its MPICH segment, and the hardened CPU manager
    (no CAP_SYS_PTRACE) cannot read the ranks' maps. Their runtime reports the segment in their slots;
    the manager removes it at release, because the job's user owns it."""
    nobody = pwd.getpwnam("nobody")
    config = unit_config(world_dir)
    cfg = load_config(config)
    STARTED_INSTANCES.add(cfg.instance)
    exe = compile_c_program(RING, world_dir)
    env = {**os.environ, "VMSCHED_CONFIG": str(config)}
    manager = subprocess.Popen(sandboxed("vm-cpumanager.service", config), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    ranks: subprocess.Popen | None = None
    topology: set[str] = set()  # hydra's file: mpiexec stands in for srun here, and is killed with the step
    try:
        wait_for(lambda: run_cli(env, world_dir, "vmcpu", "--json").returncode == 0, timeout=30, what="manager up")
        assert not effective_caps(manager.pid) & (1 << 19), "CAP_SYS_PTRACE is not granted"
        # slurmstepd runs the helper as root, with itself as the leader: here the test process.
        admit = run_cli(env, world_dir, "vmslurm-step", "admit", "--config", str(config), "--job", "77", "--step",
                        "0", "--uid", str(nobody.pw_uid), "--nranks", "4", "--leader", str(os.getpid()))  # fmt: skip
        assert admit.returncode == 0, admit.stdout + admit.stderr
        step_env = {"PATH": "/usr/bin:/bin", **dict(line.split("=", 1) for line in admit.stdout.splitlines())}
        mpich_before = mpich_segments()
        ranks = subprocess.Popen([mpiexec(), "-n", "4", str(exe), "100000000"], env=step_env, cwd=world_dir,
                                 user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        client = CpuManagerClient(cfg, timeout_s=5.0)

        def registered() -> dict | None:
            return next((j for j in client.status()["jobs"] if j["registered"] == 4), None)

        j = wait_for(registered, timeout=60, what="nobody's 4 ranks registered")
        pids = [r["pid"] for r in j["ranks"]]
        topology = {p for p in job_files(ranks.pid) if p.startswith(HYDRA_TOPOLOGY_PREFIX)}
        new = mpich_segments() - mpich_before
        assert len(new) == 1, new
        os.killpg(ranks.pid, signal.SIGKILL)  # scancel: Slurm kills the step's tasks
        ranks.wait(timeout=15)
        wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), timeout=30, what="the ranks to be gone")
        wait_for(lambda: not client.status()["jobs"], timeout=10, what="the step released")
        client.close()
        assert mpich_segments() & new == set(), "the killed step's MPICH segment is left"
        manager.send_signal(signal.SIGTERM)
        assert manager.wait(timeout=15) == 0
        assert not any(cfg.instance in n for n in vmsched_shm_entries())
    finally:
        if ranks is not None and ranks.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(ranks.pid, signal.SIGKILL)
            ranks.wait(timeout=15)
        remove_leftovers(topology)
        if manager.poll() is None:
            manager.terminate()
            manager.wait(timeout=15)


@pytest.mark.parametrize(("slot", "path"), [
    (b"ee95da22_0\0\0\0", "/dev/shm/mpich_shm_ee95da22_0"), (b"a-B_9", "/dev/shm/mpich_shm_a-B_9"),
    (b"", None), (b"\0ee95da22_0", None), (b"../../etc/passwd", None), (b"x/y", None), (b"..", None),
    (b"x y", None), (b"\xff\xfe", None), (b"ok\nx", None),
])  # fmt: skip
def test_a_reported_mpich_segment_is_only_a_plain_name_under_the_prefix(slot: bytes, path: str | None) -> None:
    assert reported_segment(slot) == path
