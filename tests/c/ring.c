/* A native MPI program for the runtime tests: a counter travels LAPS laps around the ring (every
 * rank adds rank + 1), then an Allreduce and a Bcast are checked. Prints "ring ok <value> <calls>"
 * from rank 0 and exits 0 only if every check passed on every rank.
 * Usage: ring [laps] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, laps = argc > 1 ? atoi(argv[1]) : 100, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    long value = 0;
    for (int lap = 0; lap < laps; lap++) {
        if (rank != 0) MPI_Recv(&value, 1, MPI_LONG, left, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        value += rank + 1;
        MPI_Send(&value, 1, MPI_LONG, right, lap, MPI_COMM_WORLD);
        if (rank == 0) MPI_Recv(&value, 1, MPI_LONG, left, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    long expect = (long)laps * size * (size + 1) / 2;
    if (rank == 0 && value != expect) bad = 1;
    long mine = rank, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)size * (size - 1) / 2) bad = 1;
    long b = rank == 0 ? 42 : 0;
    MPI_Bcast(&b, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (b != 42) bad = 1;
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("ring %s %ld\n", anybad ? "FAILED" : "ok", value);
    MPI_Finalize();
    return anybad;
}
