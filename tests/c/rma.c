/* One-sided communication, as programs written for it use it: ROUNDS epochs each of active target
 * (MPI_Win_fence around a Put to the right neighbour), general active target (post/start/complete/wait
 * with both neighbours), passive target (an exclusive MPI_Win_lock on rank 0 around an Accumulate) and
 * a shared-memory window (MPI_Win_allocate_shared, stores and loads under MPI_Win_lock_all, ordered by
 * MPI_Win_sync and barriers), and a ring of flags in a second shared window, each rank polling with
 * MPI_Win_sync until its left neighbour's flag shows the round. Prints {"ok": ..., "rounds": ...} on
 * rank 0; ok: every value read was the one expected. Usage: rma ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, ok = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    long cell = -1, count = 0;
    MPI_Win win, counter;
    MPI_Win_create(&cell, sizeof cell, sizeof cell, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_create(&count, sizeof count, sizeof count, MPI_INFO_NULL, MPI_COMM_WORLD, &counter);
    MPI_Group world, from_left, to_right;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &from_left);
    MPI_Group_incl(world, 1, &right, &to_right);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nrank, nsize;
    MPI_Comm_rank(node, &nrank);
    MPI_Comm_size(node, &nsize);
    long *mine;
    MPI_Win shared;
    MPI_Win_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, node, &mine, &shared);
    MPI_Aint bytes;
    int unit;
    long *theirs;
    MPI_Win_shared_query(shared, (nrank + nsize - 1) % nsize, &bytes, &unit, &theirs);
    volatile long *flag, *left_flag;
    MPI_Win flags;
    MPI_Win_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, node, (void *)&flag, &flags);
    MPI_Win_shared_query(flags, (nrank + nsize - 1) % nsize, &bytes, &unit, (void *)&left_flag);
    *flag = -1;
    MPI_Win_lock_all(0, flags);
    MPI_Win_sync(flags);
    MPI_Barrier(node);

    for (long i = 0; i < rounds; i++) {
        long v = rank * 100000 + i, one = 1;
        MPI_Win_fence(0, win);
        MPI_Put(&v, 1, MPI_LONG, right, 0, 1, MPI_LONG, win);
        MPI_Win_fence(0, win);
        ok &= cell == left * 100000 + i;

        v = -v;
        MPI_Win_post(from_left, 0, win);
        MPI_Win_start(to_right, 0, win);
        MPI_Put(&v, 1, MPI_LONG, right, 0, 1, MPI_LONG, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        ok &= cell == -(left * 100000 + i);

        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, counter);
        MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, counter);
        MPI_Win_unlock(0, counter);

        MPI_Win_lock_all(0, shared);
        *mine = nrank * 100000 + i;
        MPI_Win_sync(shared);
        MPI_Barrier(node);
        MPI_Win_sync(shared);
        ok &= *theirs == ((nrank + nsize - 1) % nsize) * 100000 + i;
        MPI_Win_unlock_all(shared);
        MPI_Barrier(node);

        if (nrank == 0) *flag = i;
        MPI_Win_sync(flags);
        while (*left_flag < i) MPI_Win_sync(flags); /* rank 0: until the round has gone all the way */
        if (nrank != 0) *flag = i;
        MPI_Win_sync(flags);
    }
    MPI_Win_unlock_all(flags);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, counter);
        ok &= count == rounds * size;
        MPI_Win_unlock(0, counter);
    }
    MPI_Win_free(&flags);
    MPI_Win_free(&shared);
    MPI_Win_free(&counter);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
    MPI_Group_free(&from_left);
    MPI_Group_free(&to_right);
    MPI_Group_free(&world);
    int all = 0;
    MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld}\n", all ? "true" : "false", rounds);
    MPI_Finalize();
    return 0;
}
