"""Hardware against simulation: one generated workload replayed for real on this node (vmreplay) and
simulated (vmsim) under the same policies; per-job response times compared (vmsim --compare-with).

Steps (each a command, printed as it runs):
1. generate the workload (vmworkload generate; 5 class-W apps, 2 CPUs, load 0.85, 300 s of arrivals);
2. each application's run time alone, the simulator's input (like the run time field of an SWF log),
   at every size a policy may give it: 1 and 2 ranks under plain mpiexec, 4 ranks (folded at MPL 2 on
   the 2 CPUs) through a private launcher (one vmreplay of a 1-job trace per application, so that no
   run overlaps the next however slow the node is);
3. the real replay of the workload under each policy (vmreplay --private);
4. vmsim of the same workload and policies with those run times, --compare-with the replay.

    python experiments/hardware_vs_sim.py --out results-hw [--replay DIR] [--dedicated DIR]

--replay/--dedicated reuse runs already made (steps 2-3 take about 15 minutes). Last line: JSON.

The real runs are only worth comparing on a quiet node: the share of the node's CPU time that other
processes took during steps 2 and 3 is measured (vmsim-calibrate's LoadMeter) and printed; above 10 %
the comparison measures that contention more than the simulator. (On a node with the kernel's
autogroup scheduling, `nice` does not make other sessions' work yield to a measurement.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.launcher.replay import slug  # noqa: E402
from vmsched.sim.calibrate import FOREIGN_MAX_PCT, LoadMeter  # noqa: E402
from vmsched.sim.compare import agreement  # noqa: E402
from vmsched.sim.runtime_model import load_model, slowdown  # noqa: E402
from vmsched.workloads.catalog import APPS  # noqa: E402
from vmsched.workloads.metrics import records_from_swf  # noqa: E402
from vmsched.workloads.swf import read_swf  # noqa: E402

BIN = Path(sys.executable).parent
KEYS = ["ep.W", "mg.W", "ft.W", "cg.W", "sweep.W"]
POLICIES = ["fcfs+easy:abort", "fjt[fjt_long_mpl=1]+easy:malleable"]
NOMINAL_T1 = ["--t1", "ep.W=19.6", "--t1", "mg.W=20.2", "--t1", "ft.W=15.3", "--t1", "cg.W=8.3", "--t1", "sweep.W=12.5"]


def sh(*argv: str | Path) -> None:
    print("$", " ".join(map(str, argv)), flush=True)
    subprocess.run([str(a) for a in argv], check=True, stdout=subprocess.DEVNULL)


def busy_sh(meter: LoadMeter, foreign: dict[str, float], step: str, *argv: str | Path) -> None:
    """sh(), and the share of the node's CPU time that processes other than ours took meanwhile."""
    before, t0 = meter.reading(), time.monotonic()
    sh(*argv)
    foreign[step] = round(meter.foreign_pct(before, meter.reading(), time.monotonic() - t0), 1)
    print(f"  other processes took {foreign[step]} % of the node's CPU time during the {step} runs", flush=True)


def wall(key: str, n: int) -> float:
    """Wall time of the application with n ranks on n CPUs under plain mpiexec (start-up included)."""
    name, cls = key.split(".")
    argv = [BIN / "mpiexec", "-n", str(n), sys.executable, "-m", f"vmsched.apps.{name}", "--class", cls]
    print("$", " ".join(map(str, argv)), flush=True)
    t0 = time.perf_counter()
    subprocess.run([str(a) for a in argv], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results-hw"))
    ap.add_argument("--replay", type=Path, help="reuse this vmreplay output of the workload")
    ap.add_argument("--dedicated", type=Path, help="reuse this vmreplay output of the dedicated runs")
    args = ap.parse_args()
    out = args.out.resolve()
    meter, foreign = LoadMeter(sorted(os.sched_getaffinity(0))), {}
    out.mkdir(parents=True, exist_ok=True)
    work = out / "workload"
    if not work.exists():
        sh(BIN / "vmworkload", "generate", "--mix", ",".join(KEYS), "--cpus", "2", "--util", "0.85", "--duration",
           "300", "--seed", "3", *NOMINAL_T1, "--params-dir", work)  # fmt: skip
    dedicated = args.dedicated
    if dedicated is None:
        dedicated = out / "dedicated"
        for i, key in enumerate(KEYS):
            # One replay per application: a trace of several, however far apart, overlaps them when
            # the node is slow, and each is then measured sharing the CPUs with the one before.
            ded = out / "dedicated-workload" / key
            ded.mkdir(parents=True, exist_ok=True)
            for name in ("template.txt", "allowed_procs.txt", "job_types.txt"):
                shutil.copy(work / name, ded / name)
            (ded / "trace.swf").write_text(f"; Version: 2.2\n; MaxProcs: 2\n1 0 -1 -1 -1 -1 -1 4 -1 -1 -1 -1 -1 {i} 2 "
                                           "-1 -1 -1\n")  # fmt: skip
            busy_sh(meter, foreign, f"dedicated {key}", BIN / "vmreplay", ded, "--private", "--policy", "fcfs",
                    "--out", dedicated / key)  # fmt: skip
    # 4 ranks alone on the 2 CPUs (MPL 2) -> the time at 4 ranks on 4 CPUs that vmsim folds by the
    # runtime model: T(4) * 2 (ranks per CPU) * s(class, MPL 2) = the time measured.
    model = load_model()
    alone = [records_from_swf(read_swf(dedicated / key / "fcfs_fifo" / "result.swf"))[0] for key in KEYS]
    t1 = []
    for key, rec in zip(KEYS, alone, strict=True):
        comm = APPS[key].communication
        s = min(slowdown(model, comm, q, 2.0) for q in ("local", "global"))
        t1 += ["--t1", f"{key}@4={rec.execution / (2 * s):.3f}"]
        for n in (1, 2):
            t1 += ["--t1", f"{key}@{n}={wall(key, n):.3f}"]
    replay = args.replay
    if replay is None:
        replay = out / "replay"
        busy_sh(meter, foreign, "replay", BIN / "vmreplay", work, "--private",
                *[a for p in POLICIES for a in ("--policy", p)], "--out", replay)  # fmt: skip
    sim = out / "sim"
    sh(BIN / "vmsim", work, *t1, *[a for p in POLICIES for a in ("--policy", p)], "--compare-with", replay,
       "--out", sim)  # fmt: skip
    result: dict[str, object] = {"t1": dict(a.split("=") for a in t1[1::2]), "foreign_cpu_pct": foreign}
    if any(pct > FOREIGN_MAX_PCT for pct in foreign.values()):
        print(f"WARNING: other processes took more than {FOREIGN_MAX_PCT} % of the node during the real runs "
              f"({foreign}): the measured times say how busy the node was, not how good the simulation is")  # fmt: skip
    for name in ("fcfs+easy:abort/fifo", "fjt[fjt_long_mpl=1]+easy:malleable/fifo"):
        measured = records_from_swf(read_swf(replay / slug(name) / "result.swf"))
        simulated = records_from_swf(read_swf(sim / slug(name) / "result.swf"))
        ag = agreement(measured, simulated)
        result[name] = {"jobs": ag.jobs, "mean_measured_s": round(ag.mean_measured, 2),
                        "mean_simulated_s": round(ag.mean_simulated, 2), "mean_error": round(ag.mean_error, 4),
                        "spearman": round(ag.spearman, 3)}  # fmt: skip
        print(f"{name}: {ag.jobs} jobs, mean response measured {ag.mean_measured:.1f} s, simulated "
              f"{ag.mean_simulated:.1f} s ({100 * ag.mean_error:+.1f} %), Spearman {ag.spearman:.3f}")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
