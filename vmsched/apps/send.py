"""SEND: the thesis's synthetic load-balance application (§3.6.1, ch. 4), variants PCTxK.

Each iteration has three phases: computation, an exchange between the even/odd rank pairs
(2i <-> 2i+1, Sendrecv; with an odd number of ranks the last rank has no partner), and a barrier.
The work vector (`elems` values, logistic map x <- 3.9 x (1 - x)) is split evenly over the ranks.
With --variant PCTxK, PCT % of the ranks (spread evenly: 50 % = the odd ranks) compute K times longer:
they repeat their computation phase K times (same result, K times the CPU time). 0x1 is balanced.
With --heavy-iters A:B the heavy ranks are heavy only in iterations A to B-1 (a job whose pattern
changes, for the LBD's re-decisions). --seconds S and --heavy-s A:B say the same in seconds from the
start of the run, so that the phases last as long on a fast node as on a slow one: the LBD's windows
are counted in the ranks' CPU time, and a phase counted in iterations shrinks with the node's speed.
With --seconds the iteration's closing Barrier is an Allreduce of "my time is up" (MAX), so that every
rank stops after the same iteration; a rank times its heavy phase on its own clock (CLOCK_MONOTONIC is
the node's), which only moves the extra work, never the data.

Checksum: exact. Element updates do not depend on the decomposition, and the final sums are
reproducible (vmsched.apps.exactsum); the exchanged messages are checked, not summed, since they depend on the
pairing. Verification: every received message holds exactly what the partner must have sent for that
iteration, all values stay in (0, 1), and rank 0 recomputes 16 sample elements serially from their
initial values and finds the same bits.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.variants import heavy_ranks, is_heavy, parse_variant

STREAM = 99
R = 3.9
SAMPLES = 16


def evolve(x: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        x = R * x * (1.0 - x)
    return x


def message(source: int, it: int, length: int) -> np.ndarray:
    """What `source` sends in iteration `it` (its partner checks it)."""
    return np.arange(length, dtype=np.float64) + (source * 1_000_003 + it)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", default="0x1", help="PCTxK: PCT %% of the ranks compute K times longer")
    parser.add_argument("--iters", type=int, default=None, help="iterations (default: by class)")
    parser.add_argument("--heavy-iters", default=None,
                        help="A:B: the heavy ranks are heavy only in iterations A..B-1 (default: all)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=None,
                        help="run for this many seconds instead of a number of iterations")  # fmt: skip
    parser.add_argument("--heavy-s", default=None,
                        help="A:B: the heavy ranks are heavy only from A to B seconds into the run")  # fmt: skip


def _span(text: str, option: str, kind: type, unit: str) -> tuple[float, float | None]:
    """'A:B' (either side may be empty) -> (A or 0, B or None); UsageError for anything else."""
    try:
        lo, hi = (kind(v) if v else None for v in text.split(":"))
    except ValueError:
        raise harness.UsageError(f"{option} must be A:B ({unit}), not {text!r}") from None
    if (lo or 0) < 0 or (hi or 0) < 0:
        raise harness.UsageError(f"{option}: {unit} are >= 0, not {text!r}")
    return lo or 0, hi


def check_options(args: argparse.Namespace, size: int) -> None:
    try:
        args.pct, args.k = parse_variant(args.variant)
    except ValueError as exc:
        raise harness.UsageError(str(exc)) from None
    if args.iters is not None and args.iters < 1:
        raise harness.UsageError(f"--iters must be >= 1, not {args.iters}")
    if args.seconds is not None and not args.seconds > 0:
        raise harness.UsageError(f"--seconds must be > 0, not {args.seconds}")
    if args.seconds is not None and args.iters is not None:
        raise harness.UsageError("--iters and --seconds exclude each other: one says how long the run is")
    if args.heavy_iters is not None and args.heavy_s is not None:
        raise harness.UsageError("--heavy-iters and --heavy-s exclude each other: one says when ranks are heavy")
    args.heavy_from, args.heavy_to = _span(args.heavy_iters or ":", "--heavy-iters", int, "iterations")
    args.heavy_s = None if args.heavy_s is None else _span(args.heavy_s, "--heavy-s", float, "seconds")


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("send", ctx.cls)
    assert isinstance(p, classes.Send)
    pct, k = ctx.args.pct, ctx.args.k
    heavy = is_heavy(ctx.rank, pct)
    lo, hi = harness.split_range(p.elems, ctx.size, ctx.rank)
    x = 0.05 + 0.9 * uniform(STREAM, np.arange(lo, hi, dtype=np.uint64))
    partner = ctx.rank ^ 1
    has_partner = partner < ctx.size
    inbox = np.empty(p.msg)
    bad_messages = 0
    seconds = ctx.args.seconds
    iters = ctx.args.iters if ctx.args.iters is not None else p.iters
    heavy_from, heavy_to = ctx.args.heavy_from, ctx.args.heavy_to
    heavy_s = ctx.args.heavy_s

    def heavy_in(it: int) -> bool:  # in the span of seconds (--heavy-s) or of iterations, B excluded
        (lo, hi), at = (heavy_s, time.perf_counter() - ctx.t0) if heavy_s else ((heavy_from, heavy_to), it)
        return lo <= at and (hi is None or at < hi)

    cpu = 0.0  # CPU seconds of the compute phases: K times more on heavy ranks, however they are scheduled
    heavy_count = 0  # iterations this rank computed K times
    it = 0
    while seconds is not None or it < iters:
        c0 = time.process_time()
        new = x
        reps = k if heavy and heavy_in(it) else 1
        heavy_count += reps > 1
        for _ in range(reps):  # the imbalance: heavy ranks redo the phase
            new = evolve(x, p.steps)
        x = new
        cpu += time.process_time() - c0
        if has_partner:
            ctx.comm.Sendrecv(message(ctx.rank, it, p.msg), partner, it, inbox, partner, it)
            bad_messages += int(not np.array_equal(inbox, message(partner, it, p.msg)))
        it += 1
        if seconds is None:
            ctx.comm.Barrier()
        elif ctx.comm.allreduce(int(time.perf_counter() - ctx.t0 >= seconds), op=MPI.MAX):
            break  # every rank's vote is in the one result: all stop after this iteration
    iters = it
    ctx.stop()

    total, total2 = repro_sums(ctx.comm, [x, x * x])
    bad = ctx.comm.allreduce(bad_messages + int(not np.all((x > 0.0) & (x < 1.0))), op=MPI.SUM)
    # Samples: exact gather (one non-zero per slot), then a serial recomputation on rank 0.
    picks = np.linspace(0, p.elems - 1, SAMPLES).astype(np.int64)
    vals = np.zeros(SAMPLES)
    mine = (picks >= lo) & (picks < hi)
    vals[mine] = x[picks[mine] - lo]
    ctx.comm.Allreduce(MPI.IN_PLACE, vals, op=MPI.SUM)
    sample_ok = True
    if ctx.rank == 0:
        ref = 0.05 + 0.9 * uniform(STREAM, picks.astype(np.uint64))
        for _ in range(iters):
            ref = evolve(ref, p.steps)
        sample_ok = bool(np.array_equal(ref, vals))
    sample_ok = ctx.comm.bcast(sample_ok, root=0)
    cpus = ctx.comm.allgather(round(cpu, 4))
    heavy_counts = ctx.comm.allgather(heavy_count)
    span = None if heavy_s else [heavy_from, iters if heavy_to is None else heavy_to]
    info = {"variant": f"{pct}x{k}", "heavy_ranks": heavy_ranks(ctx.size, pct), "iters": iters,
            "heavy_iters": span, "heavy_s": heavy_s, "heavy_counts": heavy_counts,
            "bad_messages": bad, "compute_cpu_s": cpus, "sum": total}  # fmt: skip
    return harness.Outcome(bad == 0 and sample_ok, checksum_of([total, total2]), info)


def main() -> None:
    harness.main("send", kernel, add_options, check_options)


if __name__ == "__main__":
    main()
