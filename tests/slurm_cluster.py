"""A real Slurm cluster on this one machine for the tests: munge, slurmctld and two slurmd (n1, n2).

Slurm's multiple-slurmd support lets one host run several nodes (each `slurmd -N NAME` on its own
port). Everything lives under one temporary directory (configuration, munge key and socket, state,
spool, logs); every daemon runs in the foreground as a child of this process and is stopped by its pid,
and the step daemons (`slurmstepd`) that outlive a stopped slurmd are found by their parent slurmd's
pid and stopped too. Needs Debian's `slurm-wlm` and `munge` (the README's test command installs them).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

NODES = ("n1", "n2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """`cpus_per_node`: the CPUs Slurm believes each node has (several jobs may share them with
    OverSubscribe); `extra_conf`: more slurm.conf lines (e.g. PlugStackConfig)."""

    def __init__(self, cpus_per_node: int = 1, extra_conf: str = "", oversubscribe: str = "FORCE:4") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vmsched-slurm-"))
        self.root.chmod(0o755)  # the job's user must reach its working directory
        for d in ("state", "spool", "log", "munge"):
            (self.root / d).mkdir()
        (self.root / "munge").chmod(0o700)
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        self.ctld_port = free_port()
        self.node_ports = {n: free_port() for n in NODES}
        # Job ids differ from one test cluster to the next: MPICH names its node segments after the PMI
        # job ("<job>.<step>" under Slurm), and a segment left by a job killed during MPI_Init on an
        # earlier cluster would otherwise be found by the next cluster's job of the same id.
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs={cpus_per_node} State=UNKNOWN"
            for n, p in self.node_ports.items()
        )
        self.conf.write_text(f"""\
ClusterName=vmtest
FirstJobId={random.randrange(1000, 60_000_000)}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool/%n
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.%n.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
SlurmdLogFile={self.root}/log/slurmd.%n.log
SlurmctldParameters=enable_configless
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
# Batch jobs scheduled at submission, not up to 3 s later (the default): a second sbatch on a busy node
# pended 2.6 s, as long as the 4-rank ep.W it was to fold beside then ran (test_two_sbatch_jobs_...). And
# the main scheduling loop every second, not every 60 s: the attempt at submission is "quick and simple"
# (Slurm's scheduling guide), and a job it leaves pending otherwise waits for the next event, the end of
# the job it was to fold beside. In the CI of 2d8efb0 two tests saw a second job's ranks only once the
# first job (8 and 10 s) had ended; that run kept no squeue reason or log (the tests report them now).
SchedulerParameters=batch_sched_delay=0,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=vm Nodes={",".join(NODES)} Default=YES OverSubscribe={oversubscribe} MaxTime=INFINITE State=UP
{extra_conf}
""")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> SlurmCluster:
        try:
            munged = ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                      f"--key-file={self.root}/munge/munge.key", f"--pid-file={self.root}/munge/munged.pid",
                      f"--log-file={self.root}/log/munged.log", f"--seed-file={self.root}/munge/seed"]  # fmt: skip
            self._spawn("munged", munged)
            self._wait(lambda: self.munge_socket.exists(), "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            for n in NODES:
                self._spawn(n, ["slurmd", "-D", "-N", n, "-f", str(self.conf)])
            self._wait(self.nodes_idle, "both nodes to be idle", timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - lives as long as the daemon
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log, start_new_session=True)

    def _wait(self, predicate, what: str, timeout: float = 30.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not predicate():
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}: {self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")
            time.sleep(0.1)

    def run(self, *argv: str, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(list(argv), env={**self.env, **kw.pop("env", {})}, capture_output=True, text=True,
                           timeout=timeout, cwd=kw.pop("cwd", self.root), **kw)  # fmt: skip
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
        return r

    def nodes_idle(self) -> bool:
        r = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return r.returncode == 0 and all(states.get(n) == "idle" for n in NODES)

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}")
        return "\n".join(out)

    def step_daemons(self) -> list[psutil.Process]:
        """slurmstepd processes started by our slurmd daemons (they outlive a stopped slurmd)."""
        found = []
        for n in NODES:
            p = self.procs.get(n)
            if p is None:
                continue
            try:
                found += [c for c in psutil.Process(p.pid).children() if c.name() == "slurmstepd"]
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """Cancel every job, then stop step daemons, slurmd, slurmctld and munged, each by its pid."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", "root", check=False, timeout=20)
            deadline = time.monotonic() + 20
            while self.run("squeue", "-h", check=False, timeout=10).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.2)
        steps = self.step_daemons()
        for s in steps:
            tree = [s, *s.children(recursive=True)]
            for p in tree:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(tree, timeout=10)
        for name in (*NODES, "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class VmschedCluster:
    """The test cluster with vmsched on its nodes, as docs/slurm.md sets a site up: the SPANK plugin in
    plugstack.conf and one CPU manager per node on its own CPUs, state directory and config
    (`<vm root>/<node>/vmsched.toml`, which the plugin finds through `config=<vm root>/%n/vmsched.toml`)."""

    def __init__(self, node_cpus: dict[str, str] | None = None, quantum_ms: float = 10.0, max_mpl: int = 4,
                 oversubscribe: str = "FORCE:4") -> None:  # fmt: skip
        from tests.conftest import CpuManagerProcess
        from vmsched.slurm.build import build, plugstack_line

        self.vm_root = Path(tempfile.mkdtemp(prefix="vmsched-slurm-vm-"))
        self.vm_root.chmod(0o755)
        plugin = build(self.vm_root / "spank_vmsched.so")
        self.plugstack = self.vm_root / "plugstack.conf"
        self.plugstack.write_text(plugstack_line(plugin, f"{self.vm_root}/%n/vmsched.toml") + "\n")
        self.quantum_ms = quantum_ms
        self.managers: dict[str, CpuManagerProcess] = {}
        for node, cpus in (node_cpus or {"n1": "0", "n2": "1"}).items():
            d = self.vm_root / node
            d.mkdir()
            (d / "vmsched.toml").write_text(f'state_dir = "{d}"\n[cpumanager]\ncpus = "{cpus}"\n'
                                            f"quantum_ms = {quantum_ms}\n[slurm]\nmax_mpl = {max_mpl}\n")  # fmt: skip
            self.managers[node] = CpuManagerProcess(d, cpus, quantum_ms)
        self.cluster = SlurmCluster(extra_conf=f"PlugStackConfig={self.plugstack}", oversubscribe=oversubscribe)

    def start(self) -> VmschedCluster:
        try:
            for m in self.managers.values():
                m.start()
            self.cluster.start()
        except BaseException:
            self.stop()
            raise
        return self

    def status(self, node: str) -> dict:
        with self.managers[node].client() as c:
            return c.status()

    def stop(self) -> None:
        try:
            self.cluster.stop()
        finally:
            for m in self.managers.values():
                if m.proc is not None:
                    m.stop()
            shutil.rmtree(self.vm_root, ignore_errors=True)
