"""Hardware against simulation: one generated workload replayed for real on this node (vmreplay) and
simulated (vmsim) under the same policies; per-job response times compared (vmsim --compare-with).

Steps (each a command, printed as it runs):
1. generate the workload (vmworkload generate; 5 class-W apps, 2 CPUs, load --util (0.85), 300 s of
   arrivals);
2. each application's run time alone, the simulator's input (like the run time field of an SWF log),
   at every size a policy may give it (1, 2 and 4 ranks; 4 is folded at MPL 2 on the 2 CPUs), measured
   the way the replay runs jobs: through a private launcher (one vmreplay of a 1-job trace per run, so
   that no run overlaps the next however slow the node is), in rounds over all applications and sizes;
3. the real replay of the workload, one policy at a time (vmreplay --private), each bracketed by
   rounds of step 2: round 0, policy 1, round 1, policy 2, round 2. A policy's base times are the
   median of the runs in the rounds just before and just after its replay (--reps runs per cell per
   round), so that a slow drift of the node's speed over the half hour is measured where it matters;
   Each round also measures the launcher's reaction time, which the simulator models (vmsim
   --finish-latency/--arrival-latency): from a submission to the start of a job on an idle node (the
   dedicated runs' waits), and from a job's end to the start of the next queued one (a probe of
   PROBE_JOBS jobs submitted at once, back to back);
4. vmsim of the workload under each policy with that policy's base times and latencies, --compare-with
   the replay; and once more without the latencies, to show what they account for.

    python experiments/hardware_vs_sim.py --out results-hw [--reps 1] [--replay DIR] [--dedicated DIR]
    python experiments/hardware_vs_sim.py --out results-hw --policy fcfs+easy:abort --repeat 3

--repeat K replays each policy K times (P1, P2, P1, P2, ... each between two rounds, replayK dirs,
sim-<policy>-K dirs), compares each replay with its own simulation, and then the pool of them
(compare.pooled): the same FCFS replay of one workload ranged over 18.7-31.4 s of mean response in seven
runs on one day, so one pair cannot judge a 10 % target for it (docs/vmsim.md).

--replay/--dedicated reuse runs already made (a round of step 2 takes about 4 minutes, each replay
about 5.5). With --replay, step 2 is measured in --reps rounds, all used for every policy; a --dedicated
directory with round0, round1, ... inside is used as bracketing rounds. Last line: JSON. It also
prints, per policy, each application's median run time at each size in the replay against the base time
the simulator was given ("run-time check"): where they differ, the simulated responses cannot agree,
whatever the policy code does.

Why not plain mpiexec for the base times, and why repetitions (docs/vmsim.md, "Hardware against
simulation"): on the quiet node of 2026-11-23, 2-rank jobs took 3-24 % longer under the launcher than
under plain mpiexec, and single runs were up to 19 % off the median of the same job's runs.
Why brackets: the same job alone took 7.6-12.1 s within ten minutes on that node, runs close in time
alike, so base times measured in one window and a replay in the next differed by about the 10 % that
the comparison is judged by.

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
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.launcher.replay import slug  # noqa: E402
from vmsched.sim.calibrate import FOREIGN_MAX_PCT, LoadMeter  # noqa: E402
from vmsched.sim.compare import Agreement, agreement, pooled  # noqa: E402
from vmsched.sim.runtime_model import load_model, slowdown  # noqa: E402
from vmsched.workloads.catalog import APPS  # noqa: E402
from vmsched.workloads.metrics import records_from_swf  # noqa: E402
from vmsched.workloads.params import job_requests, read_params  # noqa: E402
from vmsched.workloads.swf import read_swf  # noqa: E402

BIN = Path(sys.executable).parent
KEYS = ["ep.W", "mg.W", "ft.W", "cg.W", "sweep.W"]
POLICIES = ["fcfs+easy:abort", "fjt[fjt_long_mpl=1]+easy:malleable"]
CPUS = 2
SIZES = (1, 2, 4)  # every rank count the allowed counts of KEYS let a policy choose on CPUS CPUs
# The launcher's reaction time, as cells of the samples (so that rounds bracket them like run times): a
# job's wait on an idle node, and the gap from one job's end to the next one's start in the probe.
ARRIVAL, FINISH = ("arrival", 0), ("finish", 0)
PROBE, PROBE_KEY, PROBE_RANKS, PROBE_JOBS = "back-to-back", "cg.W", 4, 4  # the shortest app, folded as under FCFS
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


Samples = dict[tuple[str, int], list[float]]  # (application key, ranks) -> run times alone (s)


def measure_dedicated(
    out: Path, work: Path, reps: int, meter: LoadMeter, foreign: dict[str, float], dedicated: Path | None = None
) -> Path:
    """Each application alone at each size, through a private launcher as in the replay, `reps` times."""
    dedicated = dedicated or out / "dedicated"

    def run(cell: str, key: str, ranks: int, jobs: int, rep: int) -> None:
        """A private vmreplay of `jobs` runs of `key` at `ranks` ranks, all submitted at once."""
        ded = out / "dedicated-workload" / cell
        ded.mkdir(parents=True, exist_ok=True)
        for name in ("template.txt", "allowed_procs.txt", "job_types.txt"):
            shutil.copy(work / name, ded / name)
        app = KEYS.index(key)  # field 8: ranks requested; field 14: the application
        lines = [f"{j} 0 -1 -1 -1 -1 -1 {ranks} -1 -1 -1 -1 -1 {app} 2 -1 -1 -1" for j in range(1, jobs + 1)]
        (ded / "trace.swf").write_text(f"; Version: 2.2\n; MaxProcs: {CPUS}\n" + "\n".join(lines) + "\n")
        busy_sh(meter, foreign, f"dedicated {dedicated.name} {cell} #{rep}", BIN / "vmreplay", ded, "--private",
                "--policy", "fcfs", "--out", dedicated / cell / f"r{rep}")  # fmt: skip

    for rep in range(reps):  # rounds interleaved: a slow spell of the node spreads over all cells
        for key in KEYS:
            for n in SIZES:
                # One replay per run: a trace of several, however far apart, overlaps them when the
                # node is slow, and each is then measured sharing the CPUs with the one before.
                run(f"{key}@{n}", key, n, 1, rep)
        run(PROBE, PROBE_KEY, PROBE_RANKS, PROBE_JOBS, rep)  # the launcher's latency: back to back
    return dedicated


def read_dedicated(dedicated: Path) -> Samples:
    """Run times of the dedicated runs under `dedicated` (KEY@N/rK/fcfs_fifo/result.swf; the older
    layout KEY/fcfs_fifo/result.swf holds one run at 4 ranks), by application and rank count; their
    waits on the idle node under ARRIVAL, and the gaps between the back-to-back probe's jobs under FINISH."""
    samples: Samples = defaultdict(list)
    for result in sorted(dedicated.glob("**/fcfs_fifo/result.swf")):
        key = result.relative_to(dedicated).parts[0].split("@")[0]
        recs = sorted(records_from_swf(read_swf(result)), key=lambda r: r.start)
        if key == PROBE:
            samples[FINISH].extend(b.start - a.end for a, b in pairwise(recs))
            continue
        for rec in recs:
            samples[(key, rec.procs_used)].append(rec.execution)
            samples[ARRIVAL].append(rec.start - rec.submit)
    return dict(samples)


def latencies(samples: Samples) -> tuple[float, float]:
    """(arrival, finish): the launcher's median reaction times in these samples; 0 where none was measured
    (dedicated runs made before the probe existed)."""
    return tuple(round(statistics.median(samples[c]), 4) if samples.get(c) else 0.0 for c in (ARRIVAL, FINISH))


def read_rounds(dedicated: Path) -> list[Samples]:
    """The bracketing rounds under `dedicated` (round0, round1, ...), or all its runs as one round."""
    rounds = sorted((d for d in dedicated.glob("round*") if d.name[5:].isdigit()), key=lambda d: int(d.name[5:]))
    return [read_dedicated(d) for d in rounds] if rounds else [read_dedicated(dedicated)]


def around(rounds: list[Samples], index: int, policies: int) -> Samples:
    """Policy `index`'s samples: those of the rounds just before and after its replay when there is a
    round around each replay (policies + 1 of them), else all rounds."""
    chosen = rounds[index : index + 2] if len(rounds) == policies + 1 else rounds
    merged: Samples = defaultdict(list)
    for samples in chosen:
        for cell, times in samples.items():
            merged[cell].extend(times)
    return dict(merged)


def base_times(samples: Samples, fold: Callable[[str, float], float], given: dict[str, float]) -> dict[str, float]:
    """vmsim's --t1 values: per application and size the median run time alone (or the value `given`
    for KEY@N); above CPUS ranks the unfolded time that vmsim folds back by the runtime model,
    T(N) = median / (MPL * s(MPL)) with s = fold(key, MPL), so that the simulated job alone takes
    exactly the median measured."""
    missing = [f"{k}@{n}" for k in KEYS for n in SIZES if not samples.get((k, n)) and f"{k}@{n}" not in given]
    if missing:
        raise SystemExit(f"no dedicated run at {', '.join(missing)}: measure them (leave out --dedicated) or "
                         "give them with --base")  # fmt: skip
    t1 = {}
    for key in KEYS:
        for n in SIZES:
            cell = f"{key}@{n}"
            if cell in given:
                t1[cell] = given[cell]
                continue
            med, mpl = statistics.median(samples[(key, n)]), n / CPUS
            t1[cell] = round(med if mpl <= 1 else med / (mpl * fold(key, mpl)), 3)
    return t1


def runtime_check(work: Path, result: Path, alone: dict[tuple[str, int], float]) -> list[dict[str, object]]:
    """Per application and size: the median run time in the replay against the time alone that vmsim
    was given. Jobs are matched to the trace by submission order, as vmsim --compare-with matches them."""
    files = [work / n for n in ("template.txt", "allowed_procs.txt", "job_types.txt", "trace.swf")]
    apps = [KEYS[r.app_number] for r in job_requests(read_params(*files))]
    runs: Samples = defaultdict(list)
    for app, rec in zip(apps, sorted(records_from_swf(read_swf(result)), key=lambda r: (r.submit, r.id)),
                        strict=True):  # fmt: skip
        runs[(app, rec.procs_used)].append(rec.execution)
    rows = []
    for (key, n), times in sorted(runs.items()):
        med = statistics.median(times)
        rows.append({"app": key, "ranks": n, "jobs": len(times), "replay_median_s": round(med, 2),
                     "alone_s": round(alone[(key, n)], 2), "error": round(alone[(key, n)] / med - 1, 4)})  # fmt: skip
    return rows


def bracketed(repeat: int, policies: list[str]) -> list[tuple[int, str]]:
    """The replays of a bracketed run, in the order they are made: (repetition, policy), each with a
    round of dedicated runs before and after it (round k before the k-th replay)."""
    return [(rep, policy) for rep in range(repeat) for policy in policies]


def replay_dir(out: Path, rep: int, repeat: int) -> Path:
    return out / "replay" if repeat == 1 else out / f"replay{rep}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results-hw"))
    ap.add_argument("--replay", type=Path, help="reuse this vmreplay output of the workload")
    ap.add_argument("--dedicated", type=Path, help="reuse this vmreplay output of the dedicated runs")
    ap.add_argument("--util", type=float, default=0.85, help="offered load of the generated workload")
    ap.add_argument("--reps", type=int, default=1, help="dedicated runs per application and size in each round")
    ap.add_argument("--policy", action="append", choices=POLICIES, help=f"policies to compare (default: {POLICIES})")
    ap.add_argument("--repeat", type=int, default=1,
                    help="replays of each policy (each bracketed); compared one by one and pooled")  # fmt: skip
    ap.add_argument("--base", action="append", default=[], metavar="KEY@N=SECONDS",
                    help="a base time given instead of measured (e.g. from an earlier run's vmsim.json)")  # fmt: skip
    args = ap.parse_args()
    if args.repeat < 1 or args.reps < 1:
        ap.error("--repeat and --reps must be at least 1")
    if args.repeat > 1 and (args.replay or args.dedicated):
        ap.error("--repeat measures afresh: leave out --replay and --dedicated")
    policies = args.policy or POLICIES
    out = args.out.resolve()
    meter, foreign = LoadMeter(sorted(os.sched_getaffinity(0))), {}
    out.mkdir(parents=True, exist_ok=True)
    work = out / "workload"
    if not work.exists():
        sh(BIN / "vmworkload", "generate", "--mix", ",".join(KEYS), "--cpus", "2", "--util", str(args.util),
           "--duration", "300", "--seed", "3", *NOMINAL_T1, "--params-dir", work)  # fmt: skip
    model = load_model()
    given = {k: float(v) for k, v in (a.split("=", 1) for a in args.base)}

    def fold(key: str, mpl: float) -> float:  # as vmsim --queue lbd folds: the better queue
        return min(slowdown(model, APPS[key].communication, q, mpl) for q in ("local", "global"))

    order = bracketed(args.repeat, policies)
    replay, dedicated = args.replay, args.dedicated
    bracketing = replay is None and dedicated is None
    if bracketing:  # brackets: round 0, replay 1, round 1, replay 2, round 2, ...
        dedicated = out / "dedicated"
        measure_dedicated(out, work, args.reps, meter, foreign, dedicated / "round0")
        for k, (rep, policy) in enumerate(order):
            busy_sh(meter, foreign, f"replay {policy} #{rep}", BIN / "vmreplay", work, "--private", "--policy", policy,
                    "--out", replay_dir(out, rep, args.repeat))  # fmt: skip
            measure_dedicated(out, work, args.reps, meter, foreign, dedicated / f"round{k + 1}")
    elif dedicated is None:
        dedicated = measure_dedicated(out, work, args.reps, meter, foreign)
    if replay is None and not bracketing:
        replay = out / "replay"
        busy_sh(meter, foreign, "replay", BIN / "vmreplay", work, "--private",
                *[a for p in policies for a in ("--policy", p)], "--out", replay)  # fmt: skip
    rounds = read_rounds(dedicated)
    result: dict[str, object] = {"rounds": len(rounds), "foreign_cpu_pct": foreign}
    if any(pct > FOREIGN_MAX_PCT for pct in foreign.values()):
        print(f"WARNING: other processes took more than {FOREIGN_MAX_PCT} % of the node during the real runs "
              f"({foreign}): the measured times say how busy the node was, not how good the simulation is")  # fmt: skip
    agreements: dict[str, list[Agreement]] = defaultdict(list)
    ideal_agreements: dict[str, list[Agreement]] = defaultdict(list)  # simulated without the latencies
    for k, (rep, policy) in enumerate(order):
        name = f"{policy}/fifo"  # as vmreplay names it
        replayed = replay if replay is not None else replay_dir(out, rep, args.repeat)
        samples = around(rounds, k, len(order))
        base = base_times(samples, fold, given)
        t1 = [a for c, v in base.items() for a in ("--t1", f"{c}={v:.3f}")]
        # What a job alone takes in the simulation: the base time, folded above CPUS ranks.
        alone = {(c, n): base[f"{c}@{n}"] * (n / CPUS * fold(c, n / CPUS) if n > CPUS else 1)
                 for c in KEYS for n in SIZES}  # fmt: skip
        sim = out / (f"sim-{slug(name)}" if args.repeat == 1 else f"sim-{slug(name)}-{rep}")
        arrival, finish = latencies(samples)
        if not finish:
            print(f"WARNING: no back-to-back probe in {dedicated}: the simulation assumes an instant launcher")
        lat = ["--arrival-latency", str(arrival), "--finish-latency", str(finish)]
        sh(BIN / "vmsim", work, *t1, *lat, "--policy", policy, "--compare-with", replayed, "--out", sim)
        ideal = sim.with_name(sim.name + "-no-latency")
        sh(BIN / "vmsim", work, *t1, "--policy", policy, "--out", ideal)
        measured = records_from_swf(read_swf(replayed / slug(name) / "result.swf"))
        simulated = records_from_swf(read_swf(sim / slug(name) / "result.swf"))
        ag = agreement(measured, simulated)
        agreements[name].append(ag)
        ag0 = agreement(measured, records_from_swf(read_swf(ideal / slug(name) / "result.swf")))
        ideal_agreements[name].append(ag0)
        check = runtime_check(work, replayed / slug(name) / "result.swf", alone)
        # The work in each: at a high load a waiting job's response is the sum of the run times before
        # it, so an error in the total run time comes back several times over in the mean response.
        run_m, run_s = sum(r.end - r.start for r in measured), sum(r.end - r.start for r in simulated)
        wait_m = statistics.mean(r.start - r.submit for r in measured)
        wait_s = statistics.mean(r.start - r.submit for r in simulated)
        label = name if args.repeat == 1 else f"{name} #{rep}"
        print(f"{label}: total run time measured {run_m:.1f} s, simulated {run_s:.1f} s ({run_s / run_m - 1:+.1%}); "
              f"mean wait measured {wait_m:.1f} s, simulated {wait_s:.1f} s")  # fmt: skip
        result[label] = {"jobs": ag.jobs, "mean_measured_s": round(ag.mean_measured, 2),
                         "run_sum_measured_s": round(run_m, 1), "run_sum_simulated_s": round(run_s, 1),
                         "mean_wait_measured_s": round(wait_m, 2), "mean_wait_simulated_s": round(wait_s, 2),
                         "mean_simulated_s": round(ag.mean_simulated, 2), "mean_error": round(ag.mean_error, 4),
                         "spearman": round(ag.spearman, 3), "latency_s": {"arrival": arrival, "finish": finish},
                         "without_latency": {"mean_simulated_s": round(ag0.mean_simulated, 2),
                                             "mean_error": round(ag0.mean_error, 4),
                                             "spearman": round(ag0.spearman, 3)},
                         "t1": base, "runtime_check": check,
                         "dedicated_runs": {f"{c}@{n}": v for (c, n), v in sorted(samples.items())}}  # fmt: skip
        print(f"{label}: run-time check (median run time in the replay; alone, as simulated):")
        for row in check:
            print(f"  {row['app']}@{row['ranks']}: {row['jobs']} jobs, replay {row['replay_median_s']} s, alone "
                  f"{row['alone_s']} s, error {row['error']:+.1%}")  # fmt: skip
        print(f"{label}: launcher latency {finish:.3f} s after a finish, {arrival:.3f} s after an arrival "
              f"(medians of the rounds around it); without it the simulated mean is {ag0.mean_simulated:.1f} s "
              f"({100 * ag0.mean_error:+.1f} %)")  # fmt: skip
        print(f"{label}: {ag.jobs} jobs, mean response measured {ag.mean_measured:.1f} s, simulated "
              f"{ag.mean_simulated:.1f} s ({100 * ag.mean_error:+.1f} %), Spearman {ag.spearman:.3f}")  # fmt: skip
    if args.repeat > 1:
        for name, ags in agreements.items():
            pool, pool0 = pooled(ags), pooled(ideal_agreements[name])
            spread = [round(ag.mean_measured, 2) for ag in ags]
            print(f"{name}, {len(ags)} replays pooled: mean response measured {pool.mean_measured:.1f} s (the "
                  f"replays' own: {spread}), simulated {pool.mean_simulated:.1f} s ({100 * pool.mean_error:+.1f} %), "
                  f"Spearman {pool.spearman:.3f}; without the latencies {pool0.mean_simulated:.1f} s "
                  f"({100 * pool0.mean_error:+.1f} %)")  # fmt: skip
            result[f"{name} pooled"] = {"replays": len(ags), "replay_means_s": spread,
                                        "mean_measured_s": round(pool.mean_measured, 2),
                                        "mean_simulated_s": round(pool.mean_simulated, 2),
                                        "mean_error": round(pool.mean_error, 4),
                                        "spearman": round(pool.spearman, 3),
                                        "without_latency": {"mean_simulated_s": round(pool0.mean_simulated, 2),
                                                            "mean_error": round(pool0.mean_error, 4)}}  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
