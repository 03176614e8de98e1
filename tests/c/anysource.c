/* Nonblocking receives from MPI_ANY_SOURCE, completed by every completion call with the statuses
 * ignored: Wait, Waitall, Waitany, Waitsome, Test, Testall, Testany, Testsome; persistent ones
 * (Recv_init + Startall); ones on a duplicated communicator that the program frees while they are
 * pending (it goes away inside the Waitall that completes them); and Irecv + Send around a ring. Each
 * round, ranks 1..n-1 send one message per phase to rank 0 (its value: round, phase, sender), and
 * every rank sums what it received. Prints {"ok": ..., "rounds": ..., "checksum": ...} on rank 0.
 * Usage: anysource ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define PHASES 10 /* tags 1..PHASES: one per way rank 0 completes its receives */
#define MAXR 64

static long value(long round, int tag, int sender) { return round * 1000 + tag * 10 + sender; }

/* Rank 0: post one receive per sender from MPI_ANY_SOURCE with `tag`, complete them all as `tag` says. */
static long gather(int tag, int senders, MPI_Comm comm) {
    long v[MAXR], sum = 0;
    MPI_Request rq[MAXR];
    for (int i = 0; i < senders; i++) MPI_Irecv(&v[i], 1, MPI_LONG, MPI_ANY_SOURCE, tag, comm, &rq[i]);
    int idx, flag = 0, done = 0, out, idxs[MAXR];
    switch (tag) {
    case 1:
        for (int i = 0; i < senders; i++) MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
        break;
    case 2:
        MPI_Waitall(senders, rq, MPI_STATUSES_IGNORE);
        break;
    case 3:
        for (int i = 0; i < senders; i++) MPI_Waitany(senders, rq, &idx, MPI_STATUS_IGNORE);
        break;
    case 4:
        while (done < senders) {
            MPI_Waitsome(senders, rq, &out, idxs, MPI_STATUSES_IGNORE);
            done += out;
        }
        break;
    case 5:
        for (int i = 0; i < senders; i++)
            for (flag = 0; !flag;) MPI_Test(&rq[i], &flag, MPI_STATUS_IGNORE);
        break;
    case 6:
        while (!flag) MPI_Testall(senders, rq, &flag, MPI_STATUSES_IGNORE);
        break;
    case 7:
        while (done < senders) {
            MPI_Testany(senders, rq, &idx, &flag, MPI_STATUS_IGNORE);
            done += flag && idx != MPI_UNDEFINED;
        }
        break;
    default:
        while (done < senders) {
            MPI_Testsome(senders, rq, &out, idxs, MPI_STATUSES_IGNORE);
            done += out;
        }
    }
    for (int i = 0; i < senders; i++) sum += v[i];
    return sum;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100, sum = 0, expect = 0;
    int senders = size - 1;
    if (senders < 1 || senders > MAXR) MPI_Abort(MPI_COMM_WORLD, 2);
    long pv[MAXR];
    MPI_Request prq[MAXR];
    if (rank == 0) /* persistent receives from any sender, started each round */
        for (int i = 0; i < senders; i++) MPI_Recv_init(&pv[i], 1, MPI_LONG, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &prq[i]);
    for (long r = 0; r < rounds; r++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        if (rank == 0) {
            for (int tag = 1; tag <= 8; tag++) sum += gather(tag, senders, MPI_COMM_WORLD);
            MPI_Startall(senders, prq);
            MPI_Waitall(senders, prq, MPI_STATUSES_IGNORE);
            for (int i = 0; i < senders; i++) sum += pv[i];
            long v[MAXR];
            MPI_Request rq[MAXR];
            for (int i = 0; i < senders; i++) MPI_Irecv(&v[i], 1, MPI_LONG, MPI_ANY_SOURCE, 10, dup, &rq[i]);
            MPI_Comm_free(&dup); /* pending receives keep it until they complete */
            MPI_Waitall(senders, rq, MPI_STATUSES_IGNORE);
            for (int i = 0; i < senders; i++) sum += v[i];
            for (int tag = 1; tag <= PHASES; tag++)
                for (int s = 1; s <= senders; s++) expect += value(r, tag, s);
        } else {
            for (int tag = 1; tag <= PHASES; tag++) {
                long x = value(r, tag, rank);
                MPI_Send(&x, 1, MPI_LONG, 0, tag, tag == PHASES ? dup : MPI_COMM_WORLD);
            }
            MPI_Comm_free(&dup);
        }
        /* A ring: each rank sends to the next and receives from any, which can only be the previous. */
        long out = value(r, PHASES + 1, rank), in = -1;
        MPI_Request rq;
        MPI_Irecv(&in, 1, MPI_LONG, MPI_ANY_SOURCE, PHASES + 1, MPI_COMM_WORLD, &rq);
        MPI_Send(&out, 1, MPI_LONG, (rank + 1) % size, PHASES + 1, MPI_COMM_WORLD);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        sum += in;
        expect += value(r, PHASES + 1, (rank + size - 1) % size);
    }
    if (rank == 0)
        for (int i = 0; i < senders; i++) MPI_Request_free(&prq[i]);
    int ok = sum == expect, all = 0;
    long total = 0;
    MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    MPI_Reduce(&sum, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD); /* every message received before any rank writes its counts (VMRT_STATS) */
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld, \"checksum\": %ld}\n", all ? "true" : "false", rounds, total);
    MPI_Finalize();
    return 0;
}
