r"""The runtime on programs nobody here wrote: every communication pattern, folded, every way, one table.

Programs: the plain-MPI C programs of bench/patterns/patterns.c (ring in both directions, a pipeline,
master-worker with uneven tasks, a 2-D halo exchange, all-to-all, random pairs, a hand-made reduction
tree, a 1-D halo by one-sided puts and by persistent requests, two groups of ranks reducing on
communicators of their own for unequal numbers of rounds, a reduction overlapped with work by
MPI_Iallreduce; written as any MPI user would, knowing
nothing of vmsched) and the apps of vmsched/apps.

--command NAME=CMDLINE (with --check NAME=REGEX, the result to verify, and --time NAME=REGEX, the time
the program reports) runs an MPI program of yours the same ways: {iters} in CMDLINE is the count that the
calibration scales; without it the program runs as given. {ranks} is the case's number of ranks, for
programs built for one count (the NAS Parallel Benchmarks' IS: `--command 'npb-is=bin/is.B.{ranks}'`).
With --result-file NAME=GLOB each of its runs runs in a fresh directory and --check and --time read the
files matching GLOB there, for programs that write their result to a file (HPCG: `--command 'hpcg=xhpcg
--nx=32 --ny=32 --nz=32 --rt=0' --check
'hpcg=(Scaled residual mean=\S+|Departure for \w+=\S+|optimized iterations=\d+|result is VALID)'
--result-file 'hpcg=HPCG-Benchmark*.txt'`).

--work UNITS runs every pattern with that much work between its MPI calls (units of 2,000 steps of
patterns.c's generator; the patterns' own are 0-5), as programs written with long compute phases call
MPI: at 5,000, some 20 ms a phase here, every pattern makes under 200 calls per rank in the detector's
0.4-s trials, which then read no pace (vmsched/cpumanager/lbd.py), and the rows are named ring/w5000.

Shapes: MPL 2 and 4 on one and on two CPUs (2 ranks on 1 CPU, 4 on 1, 4 on 2, 8 on 2); --shapes
takes others (16x8, 32x8 on a 16-core node), ranks that do not divide evenly among them too (5x2: the job
asks for MPL 3, and local queues fold 3 ranks on one CPU and 2 on the other). The node is the CPUs this
process may run on; a job that does not fill it runs beside a compute-bound job (2 ranks per CPU) that
holds the rest, as on a shared node: on 2 CPUs, a job on one CPU beside 2 compute ranks on the other.

Ways, per program and shape, in one invocation:
- vmsched: under a private CPU manager with vmrun - `default` (no options), each global-queue
  heuristic (`progress`, `sender`, `unconsumed`, `affinity`, `rr`), `local` queues (rank r on CPU r mod P),
  `local-block` (local queues with rank r on CPU r * P / N: vmrun --placement block), and `sleep`: the
  default with every wait asleep in the kernel at once (VMRT_YIELD_WAIT_US=0: the runtime before its
  two-phase waiting, for comparison);
- `mpich-yield`: plain mpiexec with MPICH's own yielding (MPIR_CVAR_POLLS_BEFORE_YIELD=1,
  MPIR_CVAR_ENABLE_HEAVY_YIELD=1), on the job's CPUs by taskset;
- `taskset`: plain mpiexec on the job's CPUs, split by hand from the compute job (the reference);
- `timesharing`: plain mpiexec for both jobs, no pinning (only where the job does not fill the node:
  a job alone on it is the `taskset` way);
- `again`: default options once more, the A/A: default / again, paired, is this node's noise on that
  case, and a default / best within that noise is no difference between the ways (left out of `best`;
  JSON: `default_vs_again_paired_range`, and in how many cases it is off by more than 10 % either way,
  `default_vs_again_paired_off_1_1`).

Each case runs at least --min-s seconds folded: the run with default options is made first and the
iteration count scaled until it takes MARGIN times that (an app moves to its next class while its run is
shorter): runs of one way spread by 1.5-2.6x on this node, around the first as often as under it; every
way then runs the same count, in rounds that start afresh: the calibration's runs only set the count
(and the cap) and are not compared, since the run that ends a calibration is the first at its count
and the one whose time was picked for being long enough (the rings' default runs read 1.05-1.10x
their A/A twin's, `again`, while the calibration run was the first round's default run; p28,
2026-11-29). A case whose default runs still had a median under --min-s is marked
`short` (JSON: `default_median_s_min`). Every result is checked: the program's own verdict, and its
checksum equal to that of the plain taskset run. Where a vmsched way's is not, the program runs once more
under the runtime's library with no CPU manager (`unfolded`: the library stays off, nothing is folded),
and the vmsched ways are checked against that run: the library's MPI_Init sets MPICH's collective
algorithms (vmsched/vmruntime/wrappers.c, `mpich_settings`), and a program whose result depends on the
order of a floating-point reduction gets another one from them than from plain MPICH's, folded or not
(HPCG, 8 ranks: its symmetry test's "Departure for SpMV" 1.07308e-07 under plain mpiexec, 1.00601e-07
under vmsched, unfolded, and under plain mpiexec with those settings). The row then says so
(`unfolded reference`; JSON `results_by_runtime_algorithms`).
Figures per row: default / best of the vmsched ways, default / taskset, timesharing / default, each from
the median of --reps runs per way. A plain run that takes CAP_FACTOR times as long as the default one
(at least CAP_MIN_S) is stopped and counted as that long: its ratios are bounds, marked > or <, and the
results are then checked against the first plain run that ended (none: the default run). With --reps > 1
each way's fastest and slowest run are printed beside its median, and the JSON gives the largest slowest
/ fastest of any vmsched way (`vmsched_run_spread_worst`): a default / best ratio within that spread is
this node's noise as much as a difference between the ways. With --reps 2 or more, also default / best
*held out*: the best way picked on the even rounds and compared with default on the odd ones (each
round's two runs paired), and the other way round; the raw default / best picks the way whose runs
happened to be fastest on the very runs it is compared on, and reads high by this node's noise alone
(`held_out`; JSON: `default_vs_best_held_out_worst` and how many cases are over 1.1). And default / each
way *paired*: the median of the rounds' ratios, each of two runs made in the same round (the ways in turn,
in the opposite order every other round), which the node's drift in speed (20-30 % within an hour here)
moves less than a ratio of medians (JSON: `default_vs_best_paired_worst`, against the way default loses
most to, `default_vs_taskset_paired_worst`, and how many cases are over 1.1). Under them, the queues the
detector chose in each default run (the CPU manager's log). With --confirm N, a case where default is
CONFIRM_FROM (1.05) or more slower than some way, paired, runs N more rounds of default, those ways and
the A/A; their ratios join the rounds' in the paired figures (the row says which ways, JSON `confirmed`):
on a node whose A/A moves by 20 % the worst of 30 cases is over 1.1 by its noise alone after 4 rounds.
Each paired ratio comes with a distribution-free CI_LEVEL (90 %) interval for its median (order
statistics: over 8 rounds the 2nd smallest to the 2nd largest ratio, covering 93 %): a case whose
interval lies above 1.1 is slower than the bound, one whose interval straddles it is not told apart
from it by these rounds (JSON: `default_vs_best_paired_surely_over_1_1`, `..._maybe_over_1_1`). Across
cases, the geometric mean of the paired default / best and of the A/A (`..._geomean`): what the detector
costs every program shows there, where one case's noise is averaged out. Beside each paired ratio, the
seconds default loses to that way, the median of the rounds' differences (JSON:
`default_minus_best_paired_s_worst`): a fixed cost, such as the detector's settling, is the same seconds
in a run of 1 s as in one of 5 s, while its ratio falls as runs grow.
Last line: JSON.

    python bench/patterns.py [--quick] [--reps 3] [--confirm 8] [--programs ring,halo2d,ep] [--shapes 4x1,8x2]
                             [--ways local,rr] [--plot FILE]
                             [--command NAME=CMDLINE --check NAME=REGEX [--time NAME=REGEX]]...
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import math
import operator
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.apps import registry  # noqa: E402
from vmsched.apps.result import parse_result  # noqa: E402
from vmsched.cpumanager.partition import mpl  # noqa: E402
from vmsched.vmruntime.build import library_path  # noqa: E402
from vmsched.vmruntime.testing import (  # noqa: E402
    MPICH_YIELD,
    PY,
    Manager,
    compile_c_program,
    cpu_list,
    lbd_decisions,
    mpiexec,
    node_cpus,
    rank_pids,
    round_order,
    run_to_end,
    selftest_cmd,
    started_job,
    unwind_on_sigterm,
    vmrun_cmd,
)
from vmsched.vmruntime.vmrun import mpiexec_command  # noqa: E402

HERE = Path(__file__).resolve().parent
HEURISTICS = ("progress", "sender", "unconsumed", "affinity", "rr")
VMSCHED_WAYS = ("default", *HEURISTICS, "local", "local-block", "sleep")
PLAIN_WAYS = ("mpich-yield", "taskset", "timesharing")
AGAIN = "again"  # default options a second time in each round: the A/A, never a candidate for `best`
SHAPES = ((2, 1), (4, 1), (4, 2), (8, 2))  # (ranks, CPUs)
NODE = node_cpus()
COMPUTE = selftest_cmd("send", "--variant", "50x1", "--iters", "1000000", "--work", "50")  # runs until stopped

# C patterns: (iterations to start the calibration from, work units per rank per iteration)
PATTERNS = {
    "ring": (20000, 0), "ring-rev": (20000, 0), "pipeline": (20000, 1), "master-worker": (2000, 5),
    "halo2d": (2000, 2), "alltoall": (5000, 1), "random-pairs": (10000, 1), "tree": (10000, 1),
    "halo-rma": (2000, 1), "halo-persist": (20000, 1), "groups": (20000, 1),
    "overlap": (10000, 1),
}  # fmt: skip
# A plain run may take this many times as long as the default run, and at least CAP_MIN_S, before it is
# stopped: MPICH's one-sided synchronization spins without yielding, and halo-rma oversubscribed by hand
# took 25 ms per fence (4 ranks on one CPU: 65-114 s for 2,000 rounds, vmsched 0.7 s). A stopped run
# counts as that long, so its ratios are bounds (marked >).
CAP_FACTOR, CAP_MIN_S = 20, 20.0
# --confirm: a way that default is CONFIRM_FROM or more slower than, paired, is run again with default (and the
# A/A) for that many more rounds, and its paired ratio is then the median over all of them. From 1.05, not
# from the 1.1 of the acceptance: the same options read 0.83-1.20x each other over 4 rounds on a noisy
# 2-CPU node (p33, 2026-12-01), so a case just under the bound is re-measured as one just over it is.
CONFIRM_FROM = 1.05
CI_LEVEL = 0.9  # the paired ratios' intervals (median_ci): a 95 % one over 8 rounds is their whole range
# The first run must last MARGIN min_s: ep.S 4x2's first run took 1.06 s, then 0.80 s in the way it was
# compared with; the ring 4x2's 1.0 s, then a median of 0.57 s over 8 default runs (2026-11-28).
MARGIN = 1.5
APPS = {"ep": "S", "mg": "S", "ft": "S", "cg": "W", "sweep": "S"}


@dataclass(frozen=True)
class Run:
    ok: bool
    checksum: str
    seconds: float
    capped: bool = False  # stopped at the cap: `seconds` is a lower bound, there is no result
    decisions: str = ""  # a run with default options: the detector's choices (testing.lbd_decisions)


class Program:
    def __init__(self, name: str, exe: Path | None, work: int | None = None) -> None:
        self.name, self.exe = name, exe
        self.is_app = exe is None
        self.iters, self.work = (0, 0) if self.is_app else PATTERNS[name]
        # --work: the pattern at another grain. Its first count keeps the work per run about the pattern's
        # own (work 0 still costs a step), so that the calibration starts near its target rather than at a
        # run of hours (20,000 laps of a ring at work 5,000).
        self.own_work = work is None or self.is_app
        if work is not None and not self.is_app:
            self.iters = max(1, round(self.iters * (self.work + 1) / (work + 1)))
            self.work = work
        self.cls = APPS.get(name, "")  # an app's class: the next one up where a run is too short (scaled)

    def larger(self) -> bool:
        """Move an app to its next class; False for a pattern or an app at its largest class."""
        classes = registry.get_spec(self.name).classes if self.is_app else ()
        above = classes[classes.index(self.cls) + 1 :] if self.cls in classes else ()
        if above:
            self.cls = above[0]
        return bool(above)

    @property
    def label(self) -> str:
        if self.is_app:
            return f"app {self.name}.{self.cls}"
        return self.name if self.own_work else f"{self.name}/w{self.work}"

    def allows(self, nranks: int) -> bool:
        return not self.is_app or registry.get_spec(self.name).allowed(nranks)

    def argv(self, nranks: int) -> list[str]:
        if self.is_app:
            return [PY, "-m", f"vmsched.apps.{self.name}", "--class", self.cls]
        return [str(self.exe), self.name, str(self.iters), str(self.work)]

    @property
    def scalable(self) -> bool:
        """Whether `scaled` may change its iteration count (an app moves up a class instead)."""
        return not self.is_app

    def workdir(self) -> contextlib.AbstractContextManager[str | None]:
        """The directory a run runs in: the bench's own (None), or a fresh one (Command)."""
        return contextlib.nullcontext()

    def parse(self, res: subprocess.CompletedProcess[str], wall_s: float, cwd: str | None = None) -> Run:
        if res.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(res.args)} exited {res.returncode}: {res.stderr[-1500:]}")
        if self.is_app:
            r = parse_result(res.stdout)
            return Run(bool(r["verified"]), str(r["checksum"]), float(r["time"]))
        r = json.loads(res.stdout.strip().splitlines()[-1])
        return Run(bool(r["ok"]), r["checksum"], float(r["elapsed_s"]))


class Command(Program):
    """An MPI program of the user's (--command NAME=CMDLINE): `{iters}` in CMDLINE is an iteration count
    the calibration scales (from --command-iters), else it runs as given; `{ranks}` is the run's number of
    ranks (a program built for one count, such as NPB's IS, names its binary by it). Its result is every match of
    --check's regex in its output (group 1 where it has one), sorted, since ranks print in any order: a
    run is ok when it exits 0 and prints at least one, and its checksum is their digest, compared with the
    plain taskset run's as a pattern's is. Its time is --time's regex (seconds, group 1) where given, else
    the run's wall clock, less the way's start-up where `net` (one_run). With --result-file NAME=GLOB
    (`result`), every run runs in a fresh directory, and --check and --time read the files matching GLOB
    that it left there (in name order) instead of its output: HPCG, for one, writes its result to a file."""

    def __init__(self, name: str, cmdline: str, check: str, timing: str | None, iters: int, net: bool = True,
                 result: str | None = None) -> None:  # fmt: skip
        super().__init__(name, None)
        self.is_app = False
        self.cmd = shlex.split(cmdline)
        self.check, self.timing = re.compile(check), re.compile(timing) if timing else None
        self.iters, self.work = iters, 0
        self.net = net and timing is None
        self.result = result

    def workdir(self) -> contextlib.AbstractContextManager[str | None]:
        if self.result is None:
            return contextlib.nullcontext()
        return tempfile.TemporaryDirectory(prefix="vmsched-result-")

    def output(self, res: subprocess.CompletedProcess[str], cwd: str | None) -> str:
        """What --check and --time read: the run's output, or its result files (`result`)."""
        if self.result is None or cwd is None:
            return res.stdout
        return "\n".join(f.read_text(errors="replace") for f in sorted(Path(cwd).glob(self.result)) if f.is_file())

    @property
    def label(self) -> str:
        return self.name

    @property
    def scalable(self) -> bool:
        return any("{iters}" in a for a in self.cmd)

    def allows(self, nranks: int) -> bool:
        return True

    def argv(self, nranks: int) -> list[str]:
        return [a.replace("{iters}", str(self.iters)).replace("{ranks}", str(nranks)) for a in self.cmd]

    def parse(self, res: subprocess.CompletedProcess[str], wall_s: float, cwd: str | None = None) -> Run:
        text = self.output(res, cwd)
        found = sorted(m.group(1) if m.groups() else m.group(0) for m in self.check.finditer(text))
        digest = hashlib.sha256("\n".join(found).encode()).hexdigest()[:16]
        seconds = wall_s
        if self.timing:
            t = self.timing.search(text)
            if not t:
                raise RuntimeError(f"{self.name}: --time {self.timing.pattern!r} found nothing in: {text[-500:]}")
            seconds = float(t.group(1) if t.groups() else t.group(0))
        ok = res.returncode == 0 and bool(found)
        if not ok:  # why, on stderr: a plain reference run that failed so makes every way BAD, rarely, in CI
            where = f"its files {self.result}" if self.result else "its stdout"
            print(f"{self.name}: a run was not ok: exit {res.returncode}, {len(found)} results; {where}: "
                  f"{text[-500:]!r}; its stderr: {res.stderr[-1000:]!r}", file=sys.stderr)  # fmt: skip
        return Run(ok, digest, seconds)


def run(cmd: list[str], prog: Program, env: dict[str, str] | None = None, cap: float | None = None) -> Run:
    with prog.workdir() as cwd:
        t0 = time.monotonic()
        res = run_to_end(cmd, env, cap or 600, cwd=Path(cwd) if cwd else None)
        if res is None:
            if cap is None:
                raise RuntimeError(f"{' '.join(cmd)} did not end in 600 s")
            return Run(True, "", cap, capped=True)
        return prog.parse(res, time.monotonic() - t0, cwd)


@contextlib.contextmanager
def compute_beside(cmd: list[str] | None, nranks: int, env: dict[str, str] | None = None) -> Iterator[None]:
    """The compute job `cmd` of `nranks` ranks for the block (none where `cmd` is None): past its start-up
    when the block begins, ended with everything below it when the block ends, however it ends."""
    if cmd is None:
        yield
        return
    with started_job(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as comp:
        deadline = time.monotonic() + 30
        while len(rank_pids(comp.pid)) < nranks and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # past start-up, computing
        yield


# Start-up per (way, ranks, CPUs): the median wall clock of runs of a near-empty MPI program (the ring pattern
# for 1 lap). A command timed by its wall clock is charged its run less this: vmrun's start-up (its
# Python, the CPU manager's admission) took 0.9 s where mpiexec's took 0.16 s, and a short program then
# read 6.5x slower folded than split by taskset (2 ranks of tests/c/ring.c on one CPU).
STARTUP: dict[tuple[str, int, int], float] = {}
EMPTY: list[Command] = []  # set in main: the ring pattern for 1 lap, timed by its wall clock


def startup_s(m: Manager, way: str, nranks: int, cpus: int) -> float:
    key = (way, nranks, cpus)
    if key not in STARTUP:
        STARTUP[key] = statistics.median(one_run(m, EMPTY[0], nranks, cpus, way).seconds for _ in range(3))
    return STARTUP[key]


def one_run(m: Manager, prog: Program, nranks: int, cpus: int, way: str, cap: float = 600) -> Run:
    """One run of `way`, plain or folded; a command timed by its wall clock is charged it less the way's
    start-up (at least 1 ms)."""
    r = plain(prog, nranks, cpus, way, cap) if way in PLAIN_WAYS else folded(m, prog, nranks, cpus, way)
    if isinstance(prog, Command) and prog.net and not r.capped:
        r = replace(r, seconds=max(r.seconds - startup_s(m, "default" if way == AGAIN else way, nranks, cpus), 0.001))
    return r


def plain(prog: Program, nranks: int, cpus: int, way: str, cap: float) -> Run:
    mine, other = NODE[:cpus], NODE[cpus:]  # the job's CPUs and the compute job's
    env = {**os.environ, **MPICH_YIELD} if way == "mpich-yield" else None
    pin = (lambda c: []) if way == "timesharing" else (lambda c: ["taskset", "-c", cpu_list(c)])  # noqa: E731
    n = 2 * len(other)
    with compute_beside([*pin(other), mpiexec(), "-n", str(n), *COMPUTE] if other else None, n):
        return run([*pin(mine), mpiexec(), "-n", str(nranks), *prog.argv(nranks)], prog, env, cap)


def unfolded(prog: Program, nranks: int, cap: float) -> Run:
    """The program under the runtime's library without a CPU manager (no VMSCHED_* variables: the library
    stays off and no rank is folded), on the whole node: what a folded run's result must equal. Only its
    result is used."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMSCHED_")}
    return run(mpiexec_command(mpiexec(), nranks, library_path(), prog.argv(nranks), env), prog, env, cap)


def plain_reference(runs: dict[str, list[Run]]) -> tuple[str, Run]:
    """The run results are checked against: the plain taskset run, or when that was stopped the first plain
    run that ended, or when none did the default run."""
    ended = [w for w in ("taskset", *PLAIN_WAYS) if w in runs and not runs[w][0].capped]
    return (ended[0], runs[ended[0]][0]) if ended else ("default", runs["default"][0])


def checked_runs(runs: dict[str, list[Run]], more: dict[str, list[Run]], calibration: Run | None) -> list:
    """(way, its runs) of every run whose result is checked: the rounds', the confirming rounds' and the
    calibration's last run (as default's)."""
    return [*runs.items(), *more.items(), *([("default", [calibration])] if calibration else [])]


def folded_differs(runs: dict[str, list[Run]], more: dict[str, list[Run]], calibration: Run | None) -> bool:
    """Whether a vmsched way's result differs from the plain reference run's (then `unfolded` is run)."""
    way, ref = plain_reference(runs)
    return way != "default" and any(r.checksum != ref.checksum for w, rs in checked_runs(runs, more, calibration)
                                    if w not in PLAIN_WAYS for r in rs if not r.capped)  # fmt: skip


JOB_IDS = itertools.count(9001)  # folded jobs get known ids, so that the log tells their decisions apart


def folded(m: Manager, prog: Program, nranks: int, cpus: int, way: str, env: dict[str, str] | None = None) -> Run:
    """One folded run of `way` (`env`: more runtime settings, for all its jobs) beside the compute job; a
    run with default options carries the detector's decisions."""
    n = 2 * (len(NODE) - cpus)  # the compute job holds the rest of the node at MPL 2
    e = {**m.env(), **(env or {}), **({"VMRT_YIELD_WAIT_US": "0"} if way == "sleep" else {})}
    opts: dict[str, str] = {}
    if way == "local":
        opts["queue"] = "local"
    elif way == "local-block":
        opts = {"queue": "local", "placement": "block"}
    elif way in HEURISTICS:
        opts = {"queue": "global", "heuristic": way}
    job_id = next(JOB_IDS)
    with compute_beside(vmrun_cmd(m.state_dir, n, 2, COMPUTE, queue="local") if n else None, n, e):
        # MPL rounded up: 5 ranks on 2 CPUs fold 3 and 2
        r = run(vmrun_cmd(m.state_dir, nranks, mpl(nranks, cpus), prog.argv(nranks), job_id=job_id, **opts), prog, e)
    return replace(r, decisions=lbd_decisions(m.log_path.read_text(), job_id)) if not opts else r


def scaled(prog: Program, once: Callable[[], Run], min_s: float) -> Run:
    """Run `once`, scaling the pattern's iteration count until the run lasts MARGIN min_s to 3 MARGIN
    min_s (at most three times; the count of the case before is the first guess: down as well as up, or
    8 ranks of a ring on two CPUs ran 8 s a run). An app shorter than MARGIN min_s moves to its next
    class (ep.S ran 0.7 s at 8 ranks on 2 CPUs once its ranks kept their freed memory) and stays there
    for the shapes after. The last run is returned."""
    run, low = once(), MARGIN * min_s
    if prog.is_app:
        while run.seconds < low and prog.larger():
            run = once()
        return run
    if not prog.scalable:  # a command without {iters}: as given
        return run
    for _ in range(3):
        if low <= run.seconds <= 3 * low:
            break
        prog.iters = max(1, math.ceil(prog.iters * 1.25 * low / max(run.seconds, 0.01)))
        run = once()
    return run


def calibrate(m: Manager, prog: Program, nranks: int, cpus: int, min_s: float) -> Run:
    """The folded run with default options, its iteration count scaled (see `scaled`)."""
    return scaled(prog, lambda: one_run(m, prog, nranks, cpus, "default"), min_s)


def parse_shapes(spec: str) -> list[tuple[int, int]]:
    """`4x1,8x2` -> [(4, 1), (8, 2)], each RANKSxCPUS with 1 to all CPUs of the node and a rank per CPU at
    least; ValueError with the reason otherwise."""
    try:
        shapes = [tuple(map(int, s.split("x"))) for s in spec.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(shape) != 2 for shape in shapes):
        raise ValueError(f"--shapes {spec!r}: expected RANKSxCPUS,... (e.g. 4x1,8x2)")
    for nranks, cpus in shapes:
        if not 1 <= cpus <= len(NODE) or nranks < cpus:
            raise ValueError(
                f"shape {nranks}x{cpus}: needs 1 to {len(NODE)} CPUs (this node) and a rank per CPU at least"
            )
    return shapes  # type: ignore[return-value]


def parse_commands(commands: list[str], checks: list[str], times: list[str], iters: int,
                   results: list[str] | None = None) -> list[Command]:  # fmt: skip
    """--command/--check/--time/--result-file NAME=VALUE options -> the commands; ValueError with the reason
    otherwise."""

    def by_name(opts: list[str], flag: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for o in opts:
            name, eq, value = o.partition("=")
            if not eq or not name or not value:
                raise ValueError(f"{flag} {o!r}: expected NAME=VALUE")
            if name in out:
                raise ValueError(f"{flag} {name}: given twice")
            out[name] = value
        return out

    cmds, chk, tim = by_name(commands, "--command"), by_name(checks, "--check"), by_name(times, "--time")
    res = by_name(results or [], "--result-file")
    for name in cmds:
        if name in PATTERNS or name in APPS:
            raise ValueError(f"--command {name}: the name of a pattern or app; choose another")
        if name not in chk:
            raise ValueError(f"--command {name}: needs --check {name}=REGEX (every result is verified)")
    for flag, opts in (("--check", chk), ("--time", tim)):
        for name, regex in opts.items():
            if name not in cmds:
                raise ValueError(f"{flag} {name}: no --command {name}=...")
            try:
                re.compile(regex)
            except re.error as e:
                raise ValueError(f"{flag} {name}={regex!r}: {e}") from None
    for name, pattern in res.items():
        if name not in cmds:
            raise ValueError(f"--result-file {name}: no --command {name}=...")
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise ValueError(f"--result-file {name}={pattern!r}: a pattern inside the run's directory")
    if cmds and iters < 1:
        raise ValueError(f"--command-iters must be at least 1, not {iters}")
    return [Command(n, c, chk[n], tim.get(n), iters, result=res.get(n)) for n, c in cmds.items()]


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", help="comma-separated patterns and apps (default: all)")
    p.add_argument("--shapes", help="comma-separated RANKSxCPUS (default 2x1,4x1,4x2,8x2)")
    p.add_argument("--min-s", type=float, default=1.0, help="shortest reference run in seconds (default 1)")
    p.add_argument("--quick", action="store_true", help="4 ranks on 1 CPU, default/progress/sender/local/taskset")
    p.add_argument("--plot", type=Path, help="also draw default/taskset and default/best per case")
    p.add_argument("--reps", type=int, default=1, help="runs per way, in interleaved rounds; medians (default 1)")
    p.add_argument("--confirm", type=int, default=0, metavar="N",
                   help=f"N more rounds of default, again and every way it is {CONFIRM_FROM}x or more slower than, "
                        "paired; their ratios pooled with the rounds' (default 0: none)")  # fmt: skip
    p.add_argument("--ways", help=f"comma-separated ways (default all; default and taskset always run): "
                                  f"{', '.join((*VMSCHED_WAYS, AGAIN, *PLAIN_WAYS))}")  # fmt: skip
    p.add_argument(
        "--command",
        action="append",
        default=[],
        metavar="NAME=CMDLINE",
        help="also an MPI program of yours, run every way as the patterns are (needs --check NAME=...); "
        "{iters} in CMDLINE: an iteration count scaled to --min-s; {ranks}: the case's number of ranks; "
        "without --programs, only these",
    )
    p.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a command's result: every match in its output (group 1 if any), the same in every way",
    )
    p.add_argument(
        "--time",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a command's own time in seconds (group 1); default: the run's wall clock",
    )
    p.add_argument(
        "--result-file",
        action="append",
        default=[],
        metavar="NAME=GLOB",
        help="a command's result is in files, not its output: each run runs in a fresh directory, and "
        "--check and --time read the files matching GLOB there",
    )
    p.add_argument("--command-iters", type=int, default=1000, help="{iters} to start calibrating from (1000)")
    p.add_argument("--work", type=int, metavar="UNITS",
                   help="every pattern's work between its MPI calls, in units of 2,000 steps of patterns.c's "
                        "generator (default: each pattern's own, 0-5): a coarser grain, fewer calls per second; "
                        "rows read NAME/wUNITS")  # fmt: skip
    args = p.parse_args()
    if args.reps < 1:
        p.error(f"--reps must be at least 1, not {args.reps}")
    if args.confirm < 0:
        p.error(f"--confirm must be 0 or more, not {args.confirm}")
    if args.work is not None and args.work < 0:
        p.error(f"--work must be 0 or more, not {args.work}")
    try:
        commands = parse_commands(args.command, args.check, args.time, args.command_iters, args.result_file)
    except ValueError as e:
        p.error(str(e))
    names = args.programs.split(",") if args.programs else [] if commands else [*PATTERNS, *APPS]
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else list(SHAPES)
    except ValueError as e:
        p.error(str(e))
    ways = [*VMSCHED_WAYS, AGAIN, *PLAIN_WAYS]
    if args.quick:
        shapes, ways = [(4, 1)], ["default", "progress", "sender", "local", "taskset"]
    if args.ways:
        unknown = [w for w in args.ways.split(",") if w not in ways]
        if unknown:
            p.error(f"unknown way(s) {', '.join(unknown)}; choose from: {', '.join(ways)}")
        ways = ["default", "taskset", *(w for w in args.ways.split(",") if w not in ("default", "taskset"))]
    with tempfile.TemporaryDirectory(prefix="vmsched-patterns-") as tmp:
        exe = compile_c_program(HERE / "patterns" / "patterns.c", Path(tmp))
        programs = []
        for n in names:
            if n not in PATTERNS and n not in APPS:
                p.error(f"unknown program {n!r}; patterns: {', '.join(PATTERNS)}; apps: {', '.join(APPS)}")
            programs.append(Program(n, None if n in APPS else exe, args.work))
        programs += commands
        EMPTY.append(Command("start-up", f"{exe} ring 1 0", r'"ok": true', None, 0, net=False))
        rows = []
        with Manager(cpus=cpu_list(NODE)) as m:
            for prog in programs:
                for nranks, cpus in shapes:
                    if not prog.allows(nranks):
                        continue
                    # The calibration sets the count and the cap; its runs are not compared (below).
                    calibration = calibrate(m, prog, nranks, cpus, args.min_s)
                    cap = max(CAP_MIN_S, CAP_FACTOR * calibration.seconds)
                    runs: dict[str, list[Run]] = {}
                    order = ["default", "taskset", *(w for w in ways if w not in ("default", "taskset"))]
                    # Rounds interleaved, medians compared: the best of six ways is a minimum over noisy
                    # runs, so one run per way biases default/best upward by the noise alone.
                    for rnd in range(args.reps):
                        for way in round_order(order, rnd):
                            if way == "timesharing" and cpus == len(NODE):
                                continue
                            if runs.get(way) and runs[way][-1].capped:  # once stopped, not run again
                                runs[way].append(runs[way][-1])
                                continue
                            runs.setdefault(way, []).append(one_run(m, prog, nranks, cpus, way, cap))
                    more: dict[str, list[Run]] = {}
                    suspects = to_confirm(paired_ratios(runs)) if args.confirm else []
                    for rnd in range(args.confirm if suspects else 0):  # (none without a way to confirm)
                        for way in round_order(["default", *suspects], rnd):
                            more.setdefault(way, []).append(one_run(m, prog, nranks, cpus, way, cap))
                    ref = unfolded(prog, nranks, cap) if folded_differs(runs, more, calibration) else None
                    rows.append(make_row(prog, nranks, cpus, args.reps, runs, args.min_s, calibration, more, ref))
                    print_row(rows[-1], flush=True)
    return report(rows, args.plot)


def to_confirm(pr: dict[str, float]) -> list[str]:
    """The ways to run again (--confirm), from default / way paired (`paired_ratios`): those default is
    CONFIRM_FROM or more slower than, vmsched ways and taskset, and then the A/A too, so that the extra
    rounds show their own noise."""
    slower = [w for w, v in pr.items() if (w in VMSCHED_WAYS or w == "taskset") and v >= CONFIRM_FROM]
    return [*slower, AGAIN] if slower and AGAIN in pr else slower


def make_row(prog: Program, nranks: int, cpus: int, reps: int, runs: dict[str, list[Run]], min_s: float,
             calibration: Run | None = None, more: dict[str, list[Run]] | None = None,
             unfolded_ref: Run | None = None) -> dict:  # fmt: skip
    """One case: median seconds per way, the ways that were stopped at the cap, and the ways whose result
    was not the program's or differed from the reference (`plain_reference`; the vmsched ways must then at
    least agree with each other): for the vmsched ways, the `unfolded` run where one ran, ended within the
    cap and was ok (the runtime's MPICH settings, no folding). The calibration's last run is checked too,
    as default's, and so are the confirming rounds' runs (`more`), whose ratios join the paired ones
    (medians and held-out figures are of the rounds alone)."""
    more = more or {}
    reference, ref = plain_reference(runs)
    mine = unfolded_ref if unfolded_ref is not None and unfolded_ref.ok and not unfolded_ref.capped else None
    want = {w: ref if mine is None or w in PLAIN_WAYS else mine for w in (*runs, *more)}
    bad = sorted({w for w, rs in checked_runs(runs, more, calibration) for r in rs
                  if not r.capped and (not r.ok or r.checksum != want[w].checksum)})  # fmt: skip
    lists, lost = paired_lists(runs, more), paired_lists(runs, more, operator.sub)
    return {"program": prog.label, "ranks": nranks, "cpus": cpus, "iters": prog.iters, "reps": reps, "min_s": min_s,
            "seconds": {w: round(statistics.median(r.seconds for r in rs), 4) for w, rs in runs.items()},
            "range": {w: [round(min(r.seconds for r in rs), 4), round(max(r.seconds for r in rs), 4)]
                      for w, rs in runs.items()},
            "capped": sorted(w for w, rs in runs.items() if rs[0].capped),
            "held_out": held_out(runs),
            "paired": medians(lists),
            "paired_s": medians(lost),
            "paired_ci": {w: [round(x, 4) for x in median_ci(v)] for w, v in lists.items()},
            "confirmed": {w: len(rs) for w, rs in more.items() if w != "default"},
            "decisions": [r.decisions for r in runs["default"] if r.decisions],
            "reference": reference, "bad": bad,
            # the vmsched ways' results were checked against the unfolded run, which differed from plain MPICH's
            "unfolded_reference": mine is not None and mine.checksum != ref.checksum}  # fmt: skip


def paired(runs: dict[str, list[Run]], way: str, rounds: range | list[int]) -> float:
    """Median over `rounds` of default's time / `way`'s time in the same round: a round's two runs share
    the node's state (other load, its memory), which a ratio of medians over the rounds does not."""
    return statistics.median(runs["default"][i].seconds / runs[way][i].seconds for i in rounds)


def paired_lists(runs: dict[str, list[Run]], more: dict[str, list[Run]] | None = None,
                 op: Callable[[float, float], float] = operator.truediv) -> dict[str, list[float]]:  # fmt: skip
    """default / each way, round by round: a round's two runs share the node's state (other load, its
    memory), and the node's speed drifts by 20-30 % within an hour on a shared machine, which moves a
    ratio of medians. Ways stopped at the cap are left out (their times are bounds). `more`: confirming
    rounds (--confirm), each with default and the ways it ran; a way's ratios in them join its ratios in
    the rounds. `op` compares a round's two times: the ratio, or `operator.sub` for the seconds default
    loses in it."""
    n, more = len(runs["default"]), more or {}
    out = {}
    for w, rs in runs.items():
        if w == "default" or len(rs) != n or rs[0].capped:
            continue
        extra = more.get(w, [])  # a confirming round runs default and each of its ways once
        mine = [*runs["default"], *more.get("default", [])[: len(extra)]]
        out[w] = [op(d.seconds, x.seconds) for d, x in zip(mine, [*rs, *extra], strict=True)]
    return out


def medians(lists: dict[str, list[float]]) -> dict[str, float]:
    """Each way's median of its rounds' values (`paired_lists`), rounded as the JSON gives them."""
    return {w: round(statistics.median(v), 4) for w, v in lists.items()}


def paired_ratios(runs: dict[str, list[Run]], more: dict[str, list[Run]] | None = None) -> dict[str, float]:
    """default / each way, the median of the rounds' ratios (`paired_lists`)."""
    return medians(paired_lists(runs, more))


def median_ci(values: list[float], level: float = CI_LEVEL) -> tuple[float, float, float]:
    """A distribution-free interval for the median of `values` and its coverage: the k-th smallest and the
    k-th largest, with the largest k whose coverage (1 - 2 P(Bin(n, 1/2) < k)) is at least `level`, or
    the whole range where even that falls short (n < 5 at 0.9). Order statistics and a binomial sum,
    written here: the benchmarks' only statistic past a median, not worth a dependency (scipy)."""
    xs, n = sorted(values), len(values)
    if not n:
        raise ValueError("no values")

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = max((k for k in range(1, (n + 1) // 2 + 1) if coverage(k) >= level), default=1)
    return xs[k - 1], xs[n - k], coverage(k)


def held_out(runs: dict[str, list[Run]]) -> dict | None:
    """default / best way without the best way's luck: the best of six ways picked by the same runs it is
    then compared on is the way whose runs happened to be fastest, so that ratio reads high even where
    every way is as fast. Here the best way is picked on the even rounds and compared on the odd ones,
    and the other way round; the mean of the two ratios. None with fewer than two rounds."""
    ways = [w for w in runs if w in VMSCHED_WAYS and w != "default"]
    n = min(len(runs[w]) for w in ["default", *ways])
    if n < 2 or not ways:
        return None
    halves = (list(range(0, n, 2)), list(range(1, n, 2)))
    picked = [max(ways, key=lambda w: paired(runs, w, half)) for half in halves]  # default gains least on it
    ratio = (paired(runs, picked[0], halves[1]) + paired(runs, picked[1], halves[0])) / 2
    return {"default_vs_best": round(max(ratio, 0.0), 4), "picked": picked}


def ratios(row: dict) -> dict[str, float]:
    s = row["seconds"]
    best = min(v for w, v in s.items() if w in VMSCHED_WAYS)
    out = {"default_vs_best": s["default"] / best, "default_vs_taskset": s["default"] / s["taskset"]}
    if "timesharing" in s:
        out["timesharing_vs_default"] = s["timesharing"] / s["default"]
    if row.get("held_out"):
        out["default_vs_best_held_out"] = row["held_out"]["default_vs_best"]
    pr = row.get("paired", {})
    if pr:  # against the way default loses most to, round by round; and against taskset so
        worst = max((w for w in pr if w in VMSCHED_WAYS), key=pr.get)
        out["default_vs_best_paired"] = pr[worst]
        if worst in row.get("paired_s", {}):  # the seconds default loses to that way
            out["default_minus_best_paired_s"] = row["paired_s"][worst]
        ci = [c for w, c in row.get("paired_ci", {}).items() if w in VMSCHED_WAYS]
        if ci:  # the highest low end (over against some way, beyond noise) and the highest high end
            out["default_vs_best_paired_ci"] = (max(c[0] for c in ci), max(c[1] for c in ci))
        if "taskset" in pr:
            out["default_vs_taskset_paired"] = pr["taskset"]
        if AGAIN in pr:
            out["default_vs_again_paired"] = pr[AGAIN]
    return out


def print_row(row: dict, flush: bool = False) -> None:
    s, r = row["seconds"], ratios(row)
    best = min((w for w in s if w in VMSCHED_WAYS), key=s.get)
    capped = row.get("capped", [])
    mark = {w: ">" if w in capped else " " for w in ("taskset", "timesharing")}
    ts = f"{mark['timesharing']}{r['timesharing_vs_default']:5.2f}" if "timesharing_vs_default" in r else "     -"
    dt = f"{'<' if 'taskset' in capped else ' '}{r['default_vs_taskset']:5.2f}"
    note = f" (stopped at the cap: {','.join(capped)}; reference {row['reference']})" if capped else ""
    if row.get("unfolded_reference"):  # module docstring: MPICH's collective algorithms, not folding
        note += " (unfolded reference: plain MPICH's result differs)"
    if s["default"] < row["min_s"]:  # the node ran faster than at the calibration
        note += f" short: default's median under {row['min_s']:g} s"
    print(f"{row['program']:<14} {row['ranks']}x{row['cpus']} {s['default']:8.3f} {best:>10} {s[best]:8.3f} "
          f"{r['default_vs_best']:6.2f} {mark['taskset']}{s['taskset']:7.3f} {dt} {ts}  "
          f"{'ok' if not row['bad'] else 'BAD ' + ','.join(row['bad'])}{note}", flush=flush)  # fmt: skip


def spread(row: dict, way: str) -> str:
    lo, hi = row["range"][way]
    return f" [{lo:.3f}-{hi:.3f}]" if row["reps"] > 1 and way not in row["capped"] else ""


def report(rows: list[dict], plot: Path | None) -> int:
    print(f"\n{'program':<14} RxC  default  best way     best  d/best  taskset d/task ts/def  results")
    for row in rows:
        print_row(row)
    print("\nseconds per way, median [fastest-slowest run] (>: stopped at the cap, a lower bound):")
    for row in rows:
        per_way = " ".join(f"{w}={'>' if w in row['capped'] else ''}{v:.3f}{spread(row, w)}"
                           for w, v in row["seconds"].items())  # fmt: skip
        print(f"  {row['program']} {row['ranks']}x{row['cpus']} (iters {row['iters']}, median of {row['reps']}): "
              + per_way)  # fmt: skip
        if row.get("confirmed"):
            print("    confirming rounds (paired ratios below pooled with the rounds'): "
                  + ", ".join(f"{w} {k}" for w, k in row["confirmed"].items()))  # fmt: skip
        if row["decisions"]:  # one per round
            print(f"    default's queues: {' | '.join(row['decisions'])}")
        if row.get("held_out"):
            h = row["held_out"]
            print(f"    default / best, held out: {h['default_vs_best']:.2f} (best picked on the even rounds: "
                  f"{h['picked'][0]}, on the odd: {h['picked'][1]})")  # fmt: skip
        if row.get("paired"):
            ci = row.get("paired_ci", {})
            cover = f" [{100 * min(c[2] for c in ci.values()):.0f} % interval]" if ci else ""
            print(f"    default / way, median of the rounds' ratios{cover}: "
                  + " ".join(f"{w} {v:.2f}" + (f" [{ci[w][0]:.2f}-{ci[w][1]:.2f}]" if w in ci else "")
                             for w, v in row["paired"].items()))  # fmt: skip
        if row.get("paired_s"):
            print("    default - way, seconds, median of the rounds' differences: "
                  + " ".join(f"{w} {v:+.3f}" for w, v in row["paired_s"].items()))  # fmt: skip
    if STARTUP:  # what a command timed by its wall clock was charged less (net)
        print("\nstart-up subtracted from commands timed by their wall clock (median of 3 near-empty runs): "
              + ", ".join(f"{w} {n}x{c} {v:.3f} s" for (w, n, c), v in sorted(STARTUP.items())))  # fmt: skip
    rs = [ratios(r) for r in rows]
    loses = [r["timesharing_vs_default"] for r in rs if r.get("timesharing_vs_default", 0) > 1]
    figures = {
        "cases": len(rows),
        "default_vs_best_worst": round(max(r["default_vs_best"] for r in rs), 3),
        "default_vs_best_best": round(min(r["default_vs_best"] for r in rs), 3),
        "default_vs_taskset_worst": round(max(r["default_vs_taskset"] for r in rs), 3),
        "default_vs_taskset_best": round(min(r["default_vs_taskset"] for r in rs), 3),
        "timesharing_vs_default_min": round(min(loses), 2) if loses else None,
        "bad_results": sum(len(r["bad"]) for r in rows),
        "results_by_runtime_algorithms": [
            f"{r['program']} {r['ranks']}x{r['cpus']}" for r in rows if r.get("unfolded_reference")
        ],
        "default_median_s_min": round(min(r["seconds"]["default"] for r in rows), 3),
        "stopped_at_cap": [f"{r['program']} {r['ranks']}x{r['cpus']} {w}" for r in rows for w in r["capped"]],
    }
    confirmed = [r for r in rows if r.get("confirmed")]
    if confirmed:
        figures["confirmed"] = {f"{r['program']} {r['ranks']}x{r['cpus']}": sorted(r["confirmed"]) for r in confirmed}
    if STARTUP:
        figures["startup_s"] = {f"{w} {n}x{c}": round(v, 3) for (w, n, c), v in sorted(STARTUP.items())}
    held = [r["default_vs_best_held_out"] for r in rs if "default_vs_best_held_out" in r]
    if held:
        figures["default_vs_best_held_out_worst"] = round(max(held), 3)
        figures["default_vs_best_held_out_over_1_1"] = sum(h > 1.1 for h in held)
    for key in ("default_vs_best_paired", "default_vs_taskset_paired"):
        vals = [r[key] for r in rs if key in r]
        if vals:
            figures[f"{key}_worst"] = round(max(vals), 3)
            figures[f"{key}_over_1_1"] = sum(v > 1.1 for v in vals)
    lost = [r["default_minus_best_paired_s"] for r in rs if "default_minus_best_paired_s" in r]
    if lost:  # in seconds: a fixed cost reads alike in cases of any length
        figures["default_minus_best_paired_s_worst"] = round(max(lost), 3)
    for key in ("default_vs_best_paired", "default_vs_again_paired"):  # across cases: what is common to them
        vals = [r[key] for r in rs if key in r]
        if vals:
            figures[f"{key}_geomean"] = round(statistics.geometric_mean(vals), 3)
    cis = [r["default_vs_best_paired_ci"] for r in rs if "default_vs_best_paired_ci" in r]
    if cis:  # over 1.1 beyond this node's noise, and not told apart from 1.1 by it
        figures["default_vs_best_paired_surely_over_1_1"] = sum(lo > 1.1 for lo, _ in cis)
        figures["default_vs_best_paired_maybe_over_1_1"] = sum(lo <= 1.1 < hi for lo, hi in cis)
    aa = [r["default_vs_again_paired"] for r in rs if "default_vs_again_paired" in r]
    if aa:  # the same way twice: how far this node's noise alone moves a paired ratio, either way
        figures["default_vs_again_paired_range"] = [round(min(aa), 3), round(max(aa), 3)]
        figures["default_vs_again_paired_off_1_1"] = sum(max(v, 1 / v) > 1.1 for v in aa)
    # How far apart the runs of one vmsched way were (slowest / fastest): a default / best ratio inside
    # that spread is not a difference between the ways.
    spreads = [hi / lo for r in rows for w, (lo, hi) in r["range"].items() if w in VMSCHED_WAYS and lo > 0]
    if spreads and max(r["reps"] for r in rows) > 1:
        figures["vmsched_run_spread_worst"] = round(max(spreads), 3)
    slept = [r["seconds"]["default"] / r["seconds"]["sleep"] for r in rows if "sleep" in r["seconds"]]
    if slept:  # the two-phase wait against sleeping at once, per case
        figures |= {"default_vs_sleep_best": round(min(slept), 3), "default_vs_sleep_worst": round(max(slept), 3)}
    if plot:
        draw(rows, rs, plot)
    print(json.dumps(figures))
    return 1 if figures["bad_results"] else 0


def draw(rows: list[dict], rs: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['program']} {r['ranks']}x{r['cpus']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.35), 4.5))
    x = range(len(rows))
    bars = ax.bar([i - 0.2 for i in x], [r["default_vs_taskset"] for r in rs], 0.4, label="default / taskset split")
    for bar, row in zip(bars, rows, strict=True):
        if "taskset" in row.get("capped", ()):  # an upper bound: the taskset run was stopped at the cap
            bar.set_hatch("//")
            top = (bar.get_x() + bar.get_width() / 2, bar.get_height())
            ax.annotate("<", top, ha="center", va="bottom", fontsize=7)
    ax.bar([i + 0.2 for i in x], [r["default_vs_best"] for r in rs], 0.4, label="default / best vmsched way")
    held = [(i + 0.2, r["default_vs_best_held_out"]) for i, r in zip(x, rs, strict=True)
            if "default_vs_best_held_out" in r]  # fmt: skip
    if held:
        ax.scatter(*zip(*held, strict=True), marker="D", s=14, color="k", zorder=3, label="default / best, held out")
    for dx, key, label in ((-0.2, "default_vs_taskset_paired", "either, paired (median of the rounds' ratios)"),
                           (0.2, "default_vs_best_paired", None)):  # fmt: skip
        pts = [(i + dx, r[key]) for i, r in zip(x, rs, strict=True) if key in r]
        if pts:  # the node's drift moves these less than the ratios of medians the bars show
            ax.scatter(*zip(*pts, strict=True), marker="_", s=120, color="r", zorder=3, label=label)
    aa = [(i, r["default_vs_again_paired"]) for i, r in zip(x, rs, strict=True) if "default_vs_again_paired" in r]
    if aa:  # the same way twice: the node's noise on that case
        ax.scatter(*zip(*aa, strict=True), marker="o", s=16, facecolors="none", edgecolors="0.4", zorder=3,
                   label="default / default again, paired (A/A: noise)")  # fmt: skip
    ax.axhline(1.1, color="red", lw=0.8, ls="--", label="1.1")
    ax.set_xticks(list(x), labels, rotation=75, fontsize=7)
    ax.set_ylabel("time ratio (lower is better)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: bars reach every corner
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
