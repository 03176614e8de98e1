"""Self-checking MPI workloads for the runtime's tests and benchmarks (mpi4py).

    python -m vmsched.vmruntime.selftest ring [--laps L] [--size S] [--pickle]
    python -m vmsched.vmruntime.selftest pingpong [--iters K] [--size S]
    python -m vmsched.vmruntime.selftest send [--variant 50x6] [--iters I] [--work W]
    python -m vmsched.vmruntime.selftest coll [--iters I]

Every mode verifies its result and rank 0 prints one JSON line (`ok`, `elapsed_s`, a `checksum` that
does not depend on scheduling, mode-specific figures); the exit status is 0 only if every rank agrees
the result is right. Compute phases are a fixed amount of pure-Python integer work (no BLAS threads,
no memory-bandwidth effects), so a run's CPU work is the same however the ranks are scheduled.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

UNIT_ITERS = 12_000  # one work unit: about 1 ms of CPU here


def work(units: int, seed: int) -> int:
    """Deterministic CPU work: an LCG run for units * UNIT_ITERS steps."""
    acc = seed & 0xFFFFFFFF
    for _ in range(units * UNIT_ITERS):
        acc = (acc * 1103515245 + 12345) & 0xFFFFFFFF
    return acc


def ring(comm: MPI.Comm, args: argparse.Namespace) -> dict[str, object]:
    """An array travels L laps around the ring (rank r to r + 1, or r - 1 with --reverse); every rank adds
    rank+1 to each element."""
    n, r = comm.size, comm.rank
    left, right = (r - 1) % n, (r + 1) % n
    if args.reverse:  # the token travels from rank r to r - 1
        left, right = right, left
    comm.Barrier()
    t0 = time.perf_counter()
    v = np.arange(args.size, dtype=np.int64) if r == 0 else np.empty(args.size, dtype=np.int64)
    for _ in range(args.laps):
        if r != 0:
            v = comm.recv(source=left) if args.pickle else _recv(comm, v, left)
        v = v + (r + 1)
        if args.pickle:
            comm.send(v, dest=right)
        else:
            comm.Send(v, dest=right)
        if r == 0:
            v = comm.recv(source=left) if args.pickle else _recv(comm, v, left)
    elapsed = time.perf_counter() - t0
    ok = True
    if r == 0:
        ok = bool(np.array_equal(v, np.arange(args.size) + args.laps * n * (n + 1) // 2))
    return {"ok": ok, "elapsed_s": elapsed, "checksum": int(v.sum()) if r == 0 else 0,
            "hop_us": 1e6 * elapsed / (args.laps * n)}  # fmt: skip


def _recv(comm: MPI.Comm, buf: np.ndarray, src: int) -> np.ndarray:
    comm.Recv(buf, source=src)
    return buf


def pingpong(comm: MPI.Comm, args: argparse.Namespace) -> dict[str, object]:
    """Ranks 0 and 1 bounce a message; the others wait at the final barrier."""
    r = comm.rank
    buf = np.full(max(1, args.size), r, dtype=np.uint8)
    ok = True
    comm.Barrier()
    t0 = time.perf_counter()
    if r < 2 and comm.size >= 2:
        peer = 1 - r
        for i in range(args.iters):
            if r == 0:
                buf[0] = i & 0xFF
                comm.Send(buf, dest=peer)
                comm.Recv(buf, source=peer)
                ok &= buf[0] == (i + 1) & 0xFF
            else:
                comm.Recv(buf, source=peer)
                buf[0] = (buf[0] + 1) & 0xFF
                comm.Send(buf, dest=peer)
    elapsed = time.perf_counter() - t0
    comm.Barrier()
    return {"ok": bool(ok), "elapsed_s": elapsed, "checksum": args.iters, "rtt_us": 1e6 * elapsed / args.iters}


def send(comm: MPI.Comm, args: argparse.Namespace) -> dict[str, object]:
    """The thesis's synthetic `send` application: compute, even/odd exchange, barrier.

    Variant PxK: the first P % of the ranks compute K times longer (send.50x6: half the ranks, 6x).
    """
    n, r = comm.size, comm.rank
    pct, factor = (int(x) for x in args.variant.split("x"))
    heavy = r < round(n * pct / 100)
    units = args.work * (factor if heavy else 1)
    partner = r ^ 1
    acc, errors, cpu = 0, 0, 0.0
    out = np.zeros(2, dtype=np.int64)
    got = np.zeros(2, dtype=np.int64)
    comm.Barrier()
    t0 = time.perf_counter()
    for it in range(args.iters):
        c0 = time.process_time()
        acc = (acc + work(units, r * 7919 + it)) & 0xFFFFFFFF
        cpu += time.process_time() - c0
        if partner < n:
            out[:] = (r, it)
            comm.Sendrecv(out, dest=partner, recvbuf=got, source=partner)
            errors += int(got[0] != partner or got[1] != it)
        comm.Barrier()
    elapsed = time.perf_counter() - t0
    total = comm.allreduce(acc)
    cpu_total = comm.allreduce(cpu)
    return {"ok": errors == 0, "elapsed_s": elapsed, "checksum": total, "compute_cpu_s": cpu_total,
            "variant": args.variant}  # fmt: skip


def coll(comm: MPI.Comm, args: argparse.Namespace) -> dict[str, object]:
    """Collectives, probes and request completion calls, uppercase and pickled, each checked."""
    n, r = comm.size, comm.rank
    errors = 0
    t0 = time.perf_counter()

    def check(cond: bool) -> None:
        nonlocal errors
        errors += not cond

    sub = comm.Split(r % 2, r)  # a communicator whose ranks differ from the world's
    for it in range(args.iters):
        a = np.array([r + it], dtype=np.int64)
        b = np.zeros(1, dtype=np.int64)
        comm.Allreduce(a, b)
        check(b[0] == n * (n - 1) // 2 + n * it)
        comm.Reduce(a, b, root=0)
        check(r != 0 or b[0] == n * (n - 1) // 2 + n * it)
        x = np.array([it if r == 0 else -1], dtype=np.int64)
        comm.Bcast(x, root=0)
        check(x[0] == it)
        g = np.zeros(n, dtype=np.int64)
        comm.Allgather(a, g)
        check(list(g) == [i + it for i in range(n)])
        send_all = np.arange(n, dtype=np.int64) + 100 * r
        recv_all = np.zeros(n, dtype=np.int64)
        comm.Alltoall(send_all, recv_all)
        check(list(recv_all) == [r + 100 * i for i in range(n)])
        s = np.zeros(1, dtype=np.int64)
        comm.Scan(a, s)
        check(s[0] == sum(i + it for i in range(r + 1)))
        rs = np.zeros(1, dtype=np.int64)
        comm.Reduce_scatter_block(np.ones(n, dtype=np.int64) * (r + 1), rs)
        check(rs[0] == n * (n + 1) // 2)
        check(comm.allreduce(r) == n * (n - 1) // 2)
        check(comm.bcast({"it": it} if r == 0 else None, root=0) == {"it": it})
        gathered = comm.gather(r, root=0)
        check(r != 0 or gathered == list(range(n)))
        check(comm.scatter([i * i for i in range(n)] if r == 0 else None, root=0) == r * r)
        check(comm.alltoall([(r, i) for i in range(n)]) == [(i, r) for i in range(n)])
        check(sub.allreduce(r) == sum(i for i in range(n) if i % 2 == r % 2))
        check(sub.allgather(r) == [i for i in range(n) if i % 2 == r % 2])
        # point to point: nonblocking ring with Waitall, probes, Sendrecv_replace, Waitany/Testall
        left, right = (r - 1) % n, (r + 1) % n
        rb = np.zeros(1, dtype=np.int64)
        reqs = [comm.Irecv(rb, source=left, tag=it), comm.Isend(np.array([r], dtype=np.int64), dest=right, tag=it)]
        MPI.Request.Waitall(reqs)
        check(rb[0] == left)
        comm.send((r, it), dest=right, tag=1000 + it)
        st = MPI.Status()
        comm.Probe(source=left, tag=1000 + it, status=st)
        check(st.Get_source() == left)
        check(comm.recv(source=left, tag=1000 + it) == (left, it))
        buf = np.array([r], dtype=np.int64)
        comm.Sendrecv_replace(buf, dest=right, source=left)
        check(buf[0] == left)
        # Sendrecv from any source (the runtime completes it as an Irecv and an Isend): status and data
        got = np.zeros(3, dtype=np.int64)
        st = MPI.Status()
        comm.Sendrecv(np.array([r, it, 7], dtype=np.int64), dest=right, sendtag=4000 + it, recvbuf=got,
                      source=MPI.ANY_SOURCE, recvtag=MPI.ANY_TAG, status=st)  # fmt: skip
        check(list(got) == [left, it, 7] and st.Get_source() == left and st.Get_tag() == 4000 + it)
        check(st.Get_count(MPI.INT64_T) == 3)
        comm.Sendrecv(buf, dest=MPI.PROC_NULL, recvbuf=got, source=MPI.PROC_NULL, status=st)
        check(st.Get_source() == MPI.PROC_NULL and list(got) == [left, it, 7])
        req = comm.irecv(source=left, tag=2000 + it)
        comm.isend(r * 10, dest=right, tag=2000 + it).wait()
        check(req.wait() == left * 10)
        rb2 = np.zeros(1, dtype=np.int64)
        rq = [comm.Irecv(rb2, source=left, tag=3000 + it)]
        comm.Send(np.array([it], dtype=np.int64), dest=right, tag=3000 + it)
        idx = MPI.Request.Waitany(rq)
        check(idx == 0 and rb2[0] == it)
        comm.Barrier()
    sub.Free()
    elapsed = time.perf_counter() - t0
    errors = comm.allreduce(errors)
    return {"ok": errors == 0, "elapsed_s": elapsed, "checksum": args.iters * n, "errors": errors}


MODES: dict[str, Callable[[MPI.Comm, argparse.Namespace], dict[str, object]]] = {
    "ring": ring, "pingpong": pingpong, "send": send, "coll": coll,
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmsched.vmruntime.selftest", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("--laps", type=int, default=200)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--pickle", action="store_true", help="ring: lowercase (pickled) send/recv")
    p.add_argument("--reverse", action="store_true", help="ring: send to rank r - 1 instead of r + 1")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--variant", default="50x2", help="send: PxK, P %% of ranks compute K times more")
    p.add_argument("--work", type=int, default=10, help="send: work units (~1 ms) per iteration")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    res = MODES[args.mode](comm, args)
    ok = comm.allreduce(0 if res["ok"] else 1) == 0
    if comm.rank == 0:
        print(json.dumps({"mode": args.mode, "nranks": comm.size, **res, "ok": ok}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
