"""Helpers for the runtime's tests and benchmarks: a real CPU-manager daemon in a private state
directory, `vmrun` command lines, and sampling of ranks through /proc."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil

from vmsched.config import Config, load_config
from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.cpumanager.cpugroups import CpuGroups
from vmsched.held_signals import held_signals, unwind_on_sigterm  # noqa: F401 - the tools import it from here
from vmsched.protocol import DaemonUnavailable
from vmsched.vmruntime.shmclean import job_files, orphaned, remove_leftovers

PY = sys.executable
# MPICH's own yielding (plain mpiexec): each poll that finds nothing yields the CPU.
MPICH_YIELD = {"MPIR_CVAR_POLLS_BEFORE_YIELD": "1", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}


class DaemonLeak(RuntimeError):
    """The daemon did not stop in an orderly way, or left its shared memory behind."""


class Manager:
    """`vm-cpumanager` as a subprocess; `with Manager(cpus="0-1") as m:` starts and stops it.

    The one harness for a CPU-manager daemon: the tests (`tests/conftest.py` adds the suite's leak
    bookkeeping), the benchmarks and `vmsim-calibrate` use it. It is installed, rather than kept under
    tests/, because `vmsim-calibrate` (an installed console script) runs real jobs under a real manager.
    `bin_dir`: run the `vm-cpumanager` of another installation (default: this interpreter's package)."""

    def __init__(self, state_dir: Path | None = None, cpus: str = "0-1", quantum_ms: float = 10.0,
                 extra: tuple[str, ...] = (), *, bin_dir: Path | None = None, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:  # fmt: skip
        self._tmp = None if state_dir else tempfile.TemporaryDirectory(prefix="vmrt-")
        self.state_dir = Path(state_dir or self._tmp.name)  # type: ignore[union-attr]
        self.cpus, self.quantum_ms, self.extra = cpus, quantum_ms, extra
        self.bin_dir, self.base_env, self.cwd = bin_dir, env, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False  # killed as a crash would: its table may stay, `stop` removes it
        self.cfg: Config = load_config(None, self.state_dir)

    @property
    def log_path(self) -> Path:
        return self.cfg.cpumanager_log

    @property
    def out_path(self) -> Path:
        return self.state_dir / "daemon.out"

    def command(self) -> list[str]:
        exe = [str(self.bin_dir / "vm-cpumanager")] if self.bin_dir else [PY, "-m", "vmsched.cpumanager.daemon"]
        return [*exe, "--state-dir", str(self.state_dir), "--cpus", self.cpus, "--quantum-ms", str(self.quantum_ms),
                *self.extra]  # fmt: skip

    def start(self, timeout: float = 15.0) -> Manager:
        """Start it and wait until it answers (as itself, not an older daemon on the same socket)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A file, not a pipe: nobody reads a pipe while the daemon runs, and a daemon that logs enough
        # would block on a full pipe and hang.
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                                         cwd=self.cwd)  # fmt: skip
        self.killed = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaemonLeak(f"CPU manager exited with {self.proc.returncode}: {self.output()}")
            try:
                with CpuManagerClient(self.cfg, timeout_s=0.5) as c:
                    if c.call("ping")["pid"] == self.proc.pid:
                        return self
            except DaemonUnavailable:
                pass
            time.sleep(0.05)
        raise DaemonLeak(f"CPU manager did not answer within {timeout} s: {self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Stop it; DaemonLeak if it does not stop in time or an orderly stop leaves its table behind (what
        is left is removed either way, so that one failure does not spread to what runs next)."""
        if self.proc is None:
            return None
        hung = False
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                hung = True
        left = shm_entries(self.cfg)
        base = CpuGroups.detect(self.cfg.instance).base
        if base is not None and base.exists():  # its jobs' CPU groups (cpugroups.py)
            left.append(str(base))
        self.unlink_leftovers()
        if hung:
            raise DaemonLeak(f"vm-cpumanager did not stop on signal {sig} within {timeout} s")
        if left and not self.killed and sig == signal.SIGTERM:
            raise DaemonLeak(f"vm-cpumanager stopped but left {sorted(left)} behind")
        return self.proc.returncode

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the daemon (as a crash would); its segment stays until `stop()`."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(10)
        self.killed = True

    def unlink_leftovers(self) -> None:
        """A daemon that was killed cannot remove its segments and lock; do it for it."""
        from vmsched.cpumanager.table import remove_table

        remove_table(self.cfg.shm_name, self.cfg.lock_name)
        CpuGroups.detect(self.cfg.instance).close()  # its jobs' CPU groups (cpugroups.py)

    def env(self) -> dict[str, str]:
        env = dict(os.environ if self.base_env is None else self.base_env)
        env["VMSCHED_STATE_DIR"] = str(self.state_dir)
        return env

    def client(self, timeout_s: float = 5.0) -> CpuManagerClient:
        return CpuManagerClient(self.cfg, timeout_s=timeout_s)

    def status(self) -> dict:
        with self.client() as c:
            return c.status()

    def output(self) -> str:
        try:
            return self.out_path.read_text()[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> Manager:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.stop()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


@contextlib.contextmanager
def started_job(cmd: list[str], sig: int = signal.SIGTERM, **popen: Any) -> Iterator[subprocess.Popen]:
    """Popen a job (mpiexec or vmrun; `popen`: Popen's arguments) for the block. A job still running when
    the block ends, by an exception, Ctrl-C, unwind_on_sigterm's SIGTERM or otherwise, goes with everything
    below it (end_job, `sig`), a signal during its start too (vmsched.held_signals)."""
    proc = None
    try:
        with held_signals():
            proc = subprocess.Popen(cmd, **popen)
        yield proc
    finally:
        if proc is not None and proc.poll() is None:
            end_job(proc, sig)


def vmrun_cmd(state_dir: Path, nranks: int, max_mpl: int, command: list[str], queue: str | None = None,
              heuristic: str | None = None, job_id: int | None = None,
              spin_us: int | None = None, placement: str | None = None) -> list[str]:  # fmt: skip
    cmd = [PY, "-m", "vmsched.vmruntime.vmrun", "--state-dir", str(state_dir), "-n", str(nranks),
           "--max-mpl", str(max_mpl)]  # fmt: skip
    if queue:
        cmd += ["--queue", queue]
    if heuristic:
        cmd += ["--heuristic", heuristic]
    if job_id is not None:
        cmd += ["--job-id", str(job_id)]
    if spin_us is not None:
        cmd += ["--spin-us", str(spin_us)]
    if placement:
        cmd += ["--placement", placement]
    return [*cmd, "--", *command]


# The log file's time stamp (vmsched.logs), optional: a journal's lines, or older files, have none.
_STAMP = r"^(?:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) )?"


def run_following(m: Manager, cmd: list[str], job_id: int, key: str,
                  decided: bool = False) -> tuple[subprocess.CompletedProcess[str], list[str]]:  # fmt: skip
    """Run a job to its end, reading its entry in the status view (its table entry) every 5 ms: the job's
    ended process, and the values its entry's `key` took, in order, each change once (`decided`: only once
    the LBD has decided). The job is ended and reaped on any error."""
    proc = subprocess.Popen(cmd, env=m.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    values: list[str] = []
    try:
        while proc.poll() is None:
            jobs = [j for j in m.status()["jobs"] if j["job"] == job_id and (not decided or j["lbd"] == "decided")]
            if jobs and (not values or values[-1] != jobs[0][key]):
                values.append(jobs[0][key])
            time.sleep(0.005)
        out, err = proc.communicate(timeout=120)
    finally:
        end_job(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), values


def lbd_decisions(log_text: str, job_id: int) -> str:
    """The detector's decisions for one job, first to last, from the CPU manager's log (its `lbd_decision`
    events), each with its time since the job was admitted: `local (idleness, IP 4.7 %, 0.21 s) > global
    (local_slower, IP 27.7 %, 0.32 s)`, `> block (0.52 s)` where a placement trial kept a block placement,
    `> r mod P (stalled_cpu, 1.10 s)` where the watch changed the placement, then `; settled 0.55 s`: the last
    event that moved the job between queues or placements (a decision, a lost global trial, the end of a
    placement trial, the watch's change of placement), where the job spent the time before on the global queue
    or trying. Without time stamps, the decisions alone; `undecided` if none. The benchmarks print them beside
    a default run: one slower than a fixed queue is the detector's doing, and the settling time bounds what
    measuring cost it."""
    admit = re.search(rf"{_STAMP}.*action=admit job={job_id} ", log_text, re.M)
    t0 = datetime.fromisoformat(admit.group(1)) if admit and admit.group(1) else None
    pattern = (rf"{_STAMP}.*action=lbd_decision job={job_id} cvcs=[0-9.e-]+ ip=([0-9.e-]+) queue=(\w+) "
               r"decision=\d+ why=(\w+)[^\n]*")  # fmt: skip
    decided = list(re.finditer(pattern, log_text, re.M))
    if not decided:
        return "undecided"

    def since(stamp: str) -> str:
        return f"{(datetime.fromisoformat(stamp) - t0).total_seconds():.2f} s" if t0 and stamp else ""

    def when(at: str) -> str:
        return ", " + since(at) if since(at) else ""

    # (position in the log, text) of each move, in the order the log wrote them
    # (a first window that decided as a busy job's quick one says so: module lbd, "Quick window")
    moves = [(m.start(), f"{m[3]} ({m[4]}{', quick window' if ' quick=true' in m[0] else ''}, "
                         f"IP {100 * float(m[2]):.1f} %{when(m[1])})") for m in decided]  # fmt: skip
    # Placement trials (module lbd: "Placement trial"): one kept shows as `> block`; either moved the ranks.
    placed = list(re.finditer(rf"{_STAMP}.*action=lbd_trial job={job_id} queue=local placement=block kept=(\w+)",
                              log_text, re.M))  # fmt: skip
    moves += [(m.start(), f"block ({since(m[1])})" if since(m[1]) else "block") for m in placed if m[2] == "true"]
    # The watch's change of placement, a CPU stalled (module lbd: "A stalled CPU moves the placement").
    watched = list(re.finditer(rf"{_STAMP}.*action=lbd_placement job={job_id} placement=(\w+) why=(\w+)",
                               log_text, re.M))  # fmt: skip
    names = {"cyclic": "r mod P", "block": "block"}
    moves += [(m.start(), f"{names.get(m[2], m[2])} ({m[3]}{when(m[1])})") for m in watched]
    text = " > ".join(t for _, t in sorted(moves))
    lost = re.findall(rf"{_STAMP}.*action=lbd_trial job={job_id} queue=global kept=false", log_text, re.M)
    moved = [*(m[1] or "" for m in (decided[-1], *placed, *watched)), *lost]
    settled = since(max(moved))  # (ISO stamps sort as the times they name)
    return f"{text}; settled {settled}" if settled else text


def round_order(ways: Sequence[str], rnd: int) -> list[str]:
    """The ways of round `rnd`: in turn, the other way round every other round (ABBA), so that a drift in
    the node's speed within a round favours no way in the rounds' ratios."""
    return list(ways) if rnd % 2 == 0 else list(ways)[::-1]


def node_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on: the node that a benchmark splits between its jobs."""
    return tuple(sorted(os.sched_getaffinity(0)))


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 5) -> '0,1,5', for taskset -c and the CPU manager's --cpus."""
    return ",".join(map(str, cpus))


def selftest_cmd(mode: str, *args: str) -> list[str]:
    return [PY, "-m", "vmsched.vmruntime.selftest", mode, *args]


@dataclass(frozen=True)
class ProcSample:
    pid: int
    state: str  # R, S, D, T, Z, ...
    cpu: int  # CPU it last ran on
    affinity: tuple[int, ...]


def sample(pid: int) -> ProcSample | None:
    """State and last CPU from /proc/<pid>/stat (fields 3 and 39), affinity from the kernel."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rfind(b")") + 2 :].split()
        aff = tuple(sorted(os.sched_getaffinity(pid)))
    except OSError:
        return None
    return ProcSample(pid, fields[0].decode(), int(fields[36]), aff)


def rank_pids(root_pid: int, name_part: str = "python") -> list[int]:
    """Pids of the rank processes below `root_pid` (vmrun -> mpiexec -> hydra proxy -> ranks)."""
    try:
        kids = psutil.Process(root_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            if name_part in k.name() or name_part in " ".join(k.cmdline()[:3]):
                out.append(k.pid)
        except psutil.Error:
            continue
    return out


def descendants(root_pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(root_pid).children(recursive=True)
    except psutil.Error:
        return []


def run_to_end(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 900,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str] | None:  # fmt: skip
    """Run a job (mpiexec or vmrun) to its end, in `cwd` if given, and return what it printed; None if it
    was stopped at `timeout`. Stopped or interrupted (Ctrl-C, SIGTERM), its ranks and the MPICH segments
    they leave go too: subprocess.run would kill mpiexec alone."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env, "cwd": cwd}
    with started_job(cmd, signal.SIGKILL, **pipes) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def end_job(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """End a job started with mpiexec/vmrun (and everything below it), reap it, and remove the
    /dev/shm segments its killed ranks leave behind."""
    kids = descendants(proc.pid)
    mapped = job_files(proc.pid)
    try:
        since = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        since = time.time()
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for k in kids:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(kids, timeout=10)
    remove_leftovers(mapped | orphaned(os.geteuid(), since))


def node_table(shm: str) -> L.Segment:
    """A copy of the node table (as any user can read it)."""
    with open("/dev/shm/" + shm.lstrip("/"), "rb") as f:
        return L.Segment.from_buffer_copy(f.read(ctypes.sizeof(L.Segment)))


def job_segment(shm: str, job: int | None = None) -> str:
    """Path of a job's segment, from the node table; job None: the one job there."""
    (j,) = [j for j in node_table(shm).jobs if j.state != L.JOB_FREE and job in (None, j.job_id)]
    return "/dev/shm/" + j.rt_name.decode().lstrip("/")


def job_ranks(shm: str, job: int | None = None) -> list[L.RankEntry]:
    """A copy of the rank entries of a job's segment (job None: the one job on the node)."""
    path = job_segment(shm, job)
    with open(path, "rb") as f:
        seg = f.read()
    size, head = ctypes.sizeof(L.RankEntry), ctypes.sizeof(L.JobRt)
    return [L.RankEntry.from_buffer_copy(seg, head + r * size) for r in range((len(seg) - head) // size)]


def shm_entries(cfg: Config) -> list[str]:
    """What this instance left in /dev/shm (segment and semaphore)."""
    inst = cfg.instance
    try:
        return [n for n in os.listdir("/dev/shm") if inst in n]
    except OSError:
        return []


def mpiexec() -> str:
    from vmsched.vmruntime.vmrun import mpiexec_path

    path = mpiexec_path()
    if path is None:
        raise RuntimeError("mpiexec not found")
    return path


@contextlib.contextmanager
def one_session_job(m: Manager, job: int, nranks: int, max_mpl: int, command: list[str],
                    own_session: bool = True) -> Iterator[tuple[list[str], dict[str, str]]]:  # fmt: skip
    """A folded job whose ranks `mpiexec.gforker` starts in one session, a new one, as slurmstepd starts a
    step's tasks in its own: admitted for the block (this process its leader) and released after it, unless
    its ranks' end released it already. Yields the command and its environment; `own_session` False keeps
    every rank in that session (VMRT_OWN_SESSION=0, libvmrt.c's leave_session)."""
    from vmsched.protocol import ProtocolError
    from vmsched.vmruntime.build import library_path
    from vmsched.vmruntime.vmrun import job_environment

    with m.client() as c:
        c.admit(job, nranks, max_mpl, leader_pid=os.getpid())
    env = {**job_environment(m.cfg, job, base=m.env()), "LD_PRELOAD": str(library_path())}
    env.pop("VMRT_OWN_SESSION", None)  # the runtime's default
    if not own_session:
        env["VMRT_OWN_SESSION"] = "0"
    gforker = str(Path(mpiexec()).parent / "mpiexec.gforker")
    try:
        yield ["setsid", "--wait", gforker, "-n", str(nranks), *command], env
    finally:
        with m.client() as c:
            try:
                c.release(job)
            except ProtocolError:
                pass  # released already: its ranks had all ended


def compile_c_program(source: Path, out_dir: Path) -> Path:
    """Build an MPI C program with the environment's mpicc."""
    from vmsched.vmruntime.build import mpicc

    exe = out_dir / source.stem
    subprocess.run([str(mpicc()), "-O2", "-o", str(exe), str(source)], check=True, capture_output=True)
    return exe


def read_stats(path: Path) -> list[dict]:
    """The per-rank lines that VMRT_STATS=<path> makes every rank append at finalize/exit."""
    import json

    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class BackgroundLoop:
    """A thread that runs `_run` (which returns once `_stop` is set) while the object is entered."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class SiblingFlipper(BackgroundLoop):
    """A thread that admits and releases a one-rank sibling job every `period_s`, so that the
    partition of a running job shrinks and expands again and again (`with SiblingFlipper(m):`)."""

    def __init__(self, manager: Manager, job_id: int = 77, period_s: float = 0.05) -> None:
        super().__init__()
        self.manager, self.job_id, self.period_s = manager, job_id, period_s
        self.flips = 0

    def _run(self) -> None:
        from vmsched.protocol import ProtocolError

        with self.manager.client() as c:
            while not self._stop.is_set():
                try:
                    c.admit(self.job_id, 1, 1, queue="local")
                except ProtocolError:  # does not fit right now (e.g. the job is not admitted yet)
                    self._stop.wait(self.period_s)
                    continue
                self._stop.wait(self.period_s)
                c.release(self.job_id)
                self.flips += 1
                self._stop.wait(self.period_s)


class StateSampler:
    """Reads the scheduler state of a set of processes as close together in time as possible (open
    /proc/<pid>/stat files, one pread each), so that a sample is not smeared over a hand-off."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.fds = [os.open(f"/proc/{p}/stat", os.O_RDONLY) for p in pids]

    def _read(self) -> list[str]:
        raw = [os.pread(fd, 1024, 0) for fd in self.fds]
        return [r[r.rfind(b")") + 2 : r.rfind(b")") + 3].decode() for r in raw]

    def states(self) -> list[str] | None:
        """Each process's state, "R" only where two reads in a row saw it runnable: a hand-off between
        the reads of one pass shows both its giver (before) and its taker (after) as runnable, and a
        pass slowed by a loaded node shows that often (a CI run of the suite: 725 samples where a quiet
        node takes 1,950, 22 % of them with two of 4 folded ranks runnable, against 2 % when quiet).
        Slowed on purpose by a sleep after each read (tests/test_runtime_sched.py's job, 2026-12-02):
        one read per pass 97 % / 95 % / 90 % of samples with at most one runnable at 0 / 0.3 / 1 ms,
        two reads 98 % at each."""
        try:
            first, second = self._read(), self._read()
        except OSError:
            return None
        return [b if a == "R" else a for a, b in zip(first, second, strict=True)]

    def runnable_cpus(self) -> list[int] | None:
        """The CPU of every runnable process (state R): the one it runs on or is queued on (field 39)."""
        try:
            raw = [os.pread(fd, 1024, 0) for fd in self.fds]
        except OSError:
            return None
        fields = [r[r.rfind(b")") + 2 :].split() for r in raw]
        return [int(f[36]) for f in fields if f[0] == b"R"]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
