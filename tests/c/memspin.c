/* A ring of flags in a shared-memory window, each rank polling its left neighbour's flag with plain
 * loads and no MPI call at all, as hybrid codes written for MPI-3 shared memory do: ROUNDS rounds, in
 * each of which rank 0 raises its flag, every other rank raises its own once its left neighbour's shows
 * the round, and rank 0 waits for the last one. MODE "spin" polls with a pause instruction only, "yield"
 * calls sched_yield between loads. Each rank adds what it read into a sum; rank 0 prints
 * {"ok": ..., "rounds": ..., "sum": ...}: ok if every rank read every round's value, sum the same for
 * any folding. Usage: memspin ROUNDS [spin|yield] */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pause_once(int yield) {
    if (yield) {
        sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long rounds = argc > 1 ? atol(argv[1]) : 10;
    int yield = argc > 2 && strcmp(argv[2], "yield") == 0;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int rank, size;
    MPI_Comm_rank(node, &rank);
    MPI_Comm_size(node, &size);
    long *flag, *left_flag;
    MPI_Win win;
    MPI_Win_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, node, &flag, &win);
    MPI_Aint bytes;
    int unit;
    MPI_Win_shared_query(win, (rank + size - 1) % size, &bytes, &unit, &left_flag);
    __atomic_store_n(flag, -1, __ATOMIC_RELEASE);
    MPI_Win_lock_all(0, win);
    MPI_Win_sync(win);
    MPI_Barrier(node);
    MPI_Win_sync(win);

    long sum = 0;
    int ok = 1;
    for (long i = 0; i < rounds; i++) {
        if (rank == 0) __atomic_store_n(flag, i, __ATOMIC_RELEASE);
        long seen;
        while ((seen = __atomic_load_n(left_flag, __ATOMIC_ACQUIRE)) < i) pause_once(yield);
        ok &= seen == i;
        sum += seen * (rank + 1);
        if (rank != 0) __atomic_store_n(flag, i, __ATOMIC_RELEASE);
    }
    MPI_Win_unlock_all(win);

    long total = 0;
    int all_ok = 0;
    MPI_Reduce(&sum, &total, 1, MPI_LONG, MPI_SUM, 0, node);
    MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, 0, node);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld, \"sum\": %ld}\n", all_ok ? "true" : "false", rounds, total);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
