/* A message the runtime cannot count: rank 0 sends to rank 1 over an inter-communicator (the runtime
 * maps ranks of intra-communicators to the job's ranks only), rank 1 takes it with MPI_Recv, and every
 * round ends in a barrier. To the runtime, rank 1 waits to receive and nothing was sent to it, while its
 * queue-mates wait in the barrier, which its counters cannot judge. Prints {"ok": ..., "rounds": ...}
 * on rank 0. Usage: uncounted ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100, sum = 0;
    /* Rank 1 alone in one group, the others in the other; each group's rank 0 leads it. */
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 1, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank == 1 ? 0 : 1, 99, &inter);
    for (long i = 0; i < rounds; i++) {
        if (rank == 0) {
            MPI_Send(&i, 1, MPI_LONG, 0, 0, inter); /* to the other group's rank 0: world rank 1 */
        } else if (rank == 1) {
            long got;
            MPI_Recv(&got, 1, MPI_LONG, 0, 0, inter, MPI_STATUS_IGNORE);
            sum += got;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    long all = 0;
    MPI_Reduce(&sum, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld}\n", all == rounds * (rounds - 1) / 2 ? "true" : "false", rounds);
    MPI_Finalize();
    return 0;
}
