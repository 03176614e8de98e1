/* A floating-point sum whose rounding depends on the order MPI_Allreduce adds the ranks' values in:
 * large terms of either sign and small ones, ROUNDS reductions (MPICH takes its shared-memory
 * algorithms after a few), their sum printed exactly (%a) on rank 0. Under MPICH 4/5 with 8 ranks on
 * one node it prints one sum with MPICH's own algorithms and another with those the runtime sets
 * (wrappers.c, mpich_settings): tests/test_bench_patterns.py. Usage: fpsum [ROUNDS] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    double acc = 0.0;
    for (int i = 0; i < rounds; i++) {
        double mine = (rank % 2 ? 1e16 : -1e16) * (1.0 + i * 1e-3) + (rank + 1) * 0.3 + i * 0.1, sum = 0.0;
        MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        acc += sum;
    }
    if (rank == 0) printf("sum %a\n", acc);
    MPI_Finalize();
    return 0;
}
