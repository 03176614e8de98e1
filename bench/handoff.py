"""The kernel's price of one hand-off of a CPU between two processes: a futex wake and wait (a token
hand-off to a rank asleep in the kernel, without the runtime's lock and bookkeeping; `futex-rt` as the
runtime sleeps: SCHED_BATCH and a timeout on every wait) against `sched_yield` (MPICH's busy-wait on CPUs
shared by hand with `taskset`, and a hand-off to a rank that waits by yielding), in the same invocation.

Two processes pinned to one CPU pass a turn back and forth (bench/handoff.c) for `--seconds` per run,
the two ways in turns, `--reps` runs each. This is the floor under a folded job's fine-grained exchanges
(bench/patterns.py: alltoall, random pairs, the halo), which hand the CPU over every few microseconds:
whatever the runtime does around it, each of its hand-offs costs at least the futex figure.

    python bench/handoff.py [--reps 3] [--seconds 1.5] [--cpu 0]

Prints ns per hand-off and the ratios to yield; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().with_suffix(".c")
MODES = ("yield", "futex", "futex-rt")


def build(out_dir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("handoff: no C compiler (cc or gcc) on PATH")
    exe = out_dir / "handoff"
    subprocess.run([cc, "-O2", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def run(exe: Path, mode: str, cpu: int, seconds: float) -> float:
    """ns per hand-off of one run."""
    out = subprocess.run([str(exe), mode, str(cpu), str(seconds)], check=True, capture_output=True, text=True)
    name, handoffs, elapsed = out.stdout.split()
    assert name == mode and int(handoffs) > 0, out.stdout
    return float(elapsed) / int(handoffs) * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5, help="per run (at least 1 s to mean something)")
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    if args.reps < 1 or args.seconds <= 0:
        ap.error("--reps must be >= 1 and --seconds > 0")
    ns: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="vmsched-handoff-") as tmp:
        exe = build(Path(tmp))
        for rep in range(args.reps):
            for mode in MODES:
                ns[mode].append(run(exe, mode, args.cpu, args.seconds))
                print(f"  rep {rep + 1}/{args.reps} {mode:5} {ns[mode][-1]:8.0f} ns", file=sys.stderr)
    med = {m: statistics.median(v) for m, v in ns.items()}
    print(f"{'hand-off':8} {'median ns':>10} {'best ns':>8} {'worst ns':>9}")
    for m in MODES:
        print(f"{m:8} {med[m]:10.0f} {min(ns[m]):8.0f} {max(ns[m]):9.0f}")
    result: dict[str, float] = {f"{m.replace('-', '_')}_ns": round(med[m], 1) for m in MODES}
    for m in MODES[1:]:
        ratio = med[m] / med["yield"]
        print(f"{m} / yield: {ratio:.2f} (median), {min(ns[m]) / min(ns['yield']):.2f} (best), "
              f"{max(ns[m]) / max(ns['yield']):.2f} (worst)")  # fmt: skip
        result[f"{m.replace('-', '_')}_vs_yield_ratio"] = round(ratio, 3)
    result |= {"reps": args.reps, "seconds": args.seconds}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
