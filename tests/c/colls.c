/* Many small collectives in a row, as a solver's dot products and convergence checks make them:
 * MPI_Allreduce of one value, MPI_Barrier, MPI_Bcast and MPI_Reduce, ROUNDS times. Prints
 * {"ok": ..., "rounds": ...} on rank 0; ok: every result was the one expected.
 * Usage: colls ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, ok = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    for (long i = 0; i < rounds; i++) {
        long mine = rank + i, sum = 0, root = i % size, word = rank == root ? i * 7 : -1, total = 0;
        MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        ok &= sum == (long)size * (size - 1) / 2 + size * i;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Bcast(&word, 1, MPI_LONG, (int)root, MPI_COMM_WORLD);
        ok &= word == i * 7;
        MPI_Reduce(&mine, &total, 1, MPI_LONG, MPI_SUM, (int)root, MPI_COMM_WORLD);
        ok &= rank != root || total == sum;
    }
    int all = 0;
    MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld}\n", all ? "true" : "false", rounds);
    MPI_Finalize();
    return 0;
}
