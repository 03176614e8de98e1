"""What the pending reasons cost the launcher's scheduling pass: decide() alone (the baseline) against
decide() plus pending_reasons() on the same snapshot, for queues of 10, 100 and 1,000 jobs on 64 CPUs
with half the machine busy, under FCFS+EASY, FJT+EASY malleable and conservative backfilling.

    python bench/pending_reasons.py [--quick]

Prints a table; the last line is JSON (per case: milliseconds per pass and `*_ratio` = with reasons /
decide alone).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.launcher.policy import decide, parse_policy_spec  # noqa: E402
from vmsched.launcher.policy.reasons import pending_reasons  # noqa: E402
from vmsched.launcher.policy.snapshot import QueuedJob, RunningJob, Snapshot  # noqa: E402

NCPUS = 64


def snapshot(queued: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    running = tuple(RunningJob(10_000 + i, 4, 1, 4, float(i), rng.uniform(100, 1000), "long") for i in range(8))
    queue = tuple(
        QueuedJob(i + 1, 100.0 + i, "u", (rng.choice([8, 16, 32, 64]),), None, rng.choice(["long", "short"]),
                  rng.uniform(10, 3000))
        for i in range(queued)
    )  # fmt: skip
    return Snapshot(200.0, NCPUS, queue, running)


def per_pass(fn, min_s: float) -> float:  # noqa: ANN001
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_s:
            return elapsed / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings")
    args = ap.parse_args()
    min_s = 0.2 if args.quick else 1.0
    figures: dict[str, float] = {}
    print(f"{'policy':28} {'queue':>6} {'decide ms':>10} {'+reasons ms':>12} {'ratio':>6}")
    for spec in ("fcfs+easy:abort", "fjt+easy:malleable", "fcfs+conservative:none"):
        cfg = parse_policy_spec(spec)
        for queued in (10, 100, 1000):
            snap = snapshot(queued)
            alone = per_pass(lambda: decide(snap, cfg), min_s)  # noqa: B023
            both = per_pass(lambda: pending_reasons(snap, cfg, decide(snap, cfg)), min_s)  # noqa: B023
            key = f"{spec.split('+')[0]}_{spec.split('+')[1].split(':')[0]}_{queued}"
            figures[f"{key}_decide_ms"] = alone * 1000
            figures[f"{key}_with_reasons_ms"] = both * 1000
            figures[f"{key}_ratio"] = both / alone
            print(f"{spec:28} {queued:>6} {alone * 1000:>10.3f} {both * 1000:>12.3f} {both / alone:>6.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
