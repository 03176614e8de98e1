/* A ring whose odd ranks are slow: a counter travels LAPS laps (rank r adds r + 1), and every odd rank
 * spends US microseconds of its own CPU time between its receive and its send; even ranks pass it on at
 * once. Folded 2 per CPU on local queues (ranks 0, 2 on one CPU, 1, 3 on the other), an even rank's
 * receive waits for two slow hops, while its queue-mate, waiting too, can take nothing: the two pass
 * their token back and forth, each wait for it a few microseconds. Timed in CPU time, not in work
 * units, so that the hops are as long on any node. Prints {"ok": ..., "checksum": ...} on rank 0.
 * Usage: slow_hops LAPS US */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void busy(long us) {
    int64_t until = cpu_ns() + (int64_t)us * 1000;
    while (cpu_ns() < until) {
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long laps = argc > 1 ? atol(argv[1]) : 1000, us = argc > 2 ? atol(argv[2]) : 100;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long value = 0;
    for (long lap = 0; lap < laps && size > 1; lap++) {
        if (rank != 0) MPI_Recv(&value, 1, MPI_LONG, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rank % 2) busy(us);
        value += rank + 1;
        MPI_Send(&value, 1, MPI_LONG, next, 0, MPI_COMM_WORLD);
        if (rank == 0) MPI_Recv(&value, 1, MPI_LONG, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    long expect = size > 1 ? laps * size * (size + 1) / 2 : 0;
    int ok = rank != 0 || value == expect, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"checksum\": %ld}\n", all ? "true" : "false", value);
    MPI_Finalize();
    return !all;
}
