"""RING: message latency app, --mode ring (token around all ranks) or pingpong (pairs 2i <-> 2i+1).

ring: rank 0 sends a token of --size bytes to rank 1, ..., rank n-1 back to rank 0, --iters laps.
Rank 0 writes the lap number into the token; every rank checks it and adds one to the hop counter.
pingpong: in every pair the even rank sends, the odd rank answers, --iters round trips; with an odd
number of ranks the last rank exchanges with itself (Sendrecv). Both report the one-way latency.

Checksum: depends on mode, iters and size only (it hashes the verified lap payloads), not on the
number of ranks. Verification: every token and reply arrives with the expected lap number and
pattern, and the ring's hop counter equals iters * ranks at the end.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.exactsum import checksum_of

HEADER = 2  # int64 words: lap number, hop counter


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", default="ring", help="ring (default) or pingpong")
    parser.add_argument("--iters", type=int, default=None, help="laps / round trips (default: by class)")
    parser.add_argument("--size", type=int, default=16, help="message size in bytes (>= 16, default 16)")


def check_options(args: argparse.Namespace, size: int) -> None:
    if args.mode not in ("ring", "pingpong"):
        raise harness.UsageError(f"unknown mode {args.mode!r}; choose ring or pingpong")
    if args.iters is not None and args.iters < 1:
        raise harness.UsageError(f"--iters must be >= 1, not {args.iters}")
    if args.size < 8 * HEADER or args.size % 8:
        raise harness.UsageError(f"--size must be a multiple of 8 and >= {8 * HEADER}, not {args.size}")


def payload(words: int, lap: int) -> np.ndarray:
    token = np.arange(words, dtype=np.int64) * 7 + lap
    token[:HEADER] = (lap, 0)
    return token


def ring(ctx: harness.AppContext, iters: int, words: int) -> tuple[int, int]:
    """Returns (bad tokens seen here, final hop counter on rank 0)."""
    comm, rank, size = ctx.comm, ctx.rank, ctx.size
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    token = np.empty(words, dtype=np.int64)
    bad = 0
    hops = 0
    for lap in range(iters):
        if rank == 0:
            out = payload(words, lap)
            out[1] = hops + 1
            if size == 1:
                comm.Sendrecv(out, 0, lap, token, 0, lap)
            else:
                comm.Send(out, nxt, lap)
                comm.Recv(token, prev, lap)
            hops = int(token[1])
        else:
            comm.Recv(token, prev, lap)
            token[1] += 1
            comm.Send(token, nxt, lap)
        expect = payload(words, lap)
        bad += int(not np.array_equal(token[2:], expect[2:]) or token[0] != lap)
    return bad, hops


def pingpong(ctx: harness.AppContext, iters: int, words: int) -> int:
    comm, rank = ctx.comm, ctx.rank
    partner = rank ^ 1 if (rank ^ 1) < ctx.size else rank
    buf = np.empty(words, dtype=np.int64)
    bad = 0
    for lap in range(iters):
        out = payload(words, lap)
        if partner == rank:
            comm.Sendrecv(out, rank, lap, buf, rank, lap)
        elif rank % 2 == 0:
            comm.Send(out, partner, lap)
            comm.Recv(buf, partner, lap)
        else:
            comm.Recv(buf, partner, lap)
            comm.Send(buf, partner, lap)
        bad += int(not np.array_equal(buf, out))
    return bad


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("ring", ctx.cls)
    assert isinstance(p, classes.Ring)
    args = ctx.args
    iters = args.iters if args.iters is not None else p.iters
    words = args.size // 8
    if args.mode == "ring":
        bad, hops = ring(ctx, iters, words)
        messages = iters * ctx.size
    else:
        bad, hops = pingpong(ctx, iters, words), 0
        messages = 2 * iters
    ctx.stop()
    bad = ctx.comm.allreduce(bad, op=MPI.SUM)
    ok = bad == 0 and (args.mode != "ring" or ctx.comm.bcast(hops, root=0) == iters * ctx.size)
    elapsed = ctx.elapsed or 0.0
    info = {"mode": args.mode, "iters": iters, "size": args.size, "bad": bad,
            "latency_us": round(elapsed / messages * 1e6, 3)}  # fmt: skip
    return harness.Outcome(ok, checksum_of([args.mode, iters, args.size, int(payload(words, iters - 1).sum())]), info)


def main() -> None:
    harness.main("ring", kernel, add_options, check_options)


if __name__ == "__main__":
    main()
