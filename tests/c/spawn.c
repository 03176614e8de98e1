/* MPI_Comm_spawn as a master-worker code uses it: the job's ranks together spawn WORKERS processes of
 * this same program (default: as many as the job has ranks, the case where a worker's MPI_COMM_WORLD
 * has the job's size), rank 0 hands each worker a seed over the inter-communicator, the workers pass a
 * token round a ring of their own ROUNDS times and sum their seeds' squares with an Allreduce, and
 * worker 0 sends the total back. Rank 0 of the job prints {"ok": ..., "workers": N, "rounds": R}; ok:
 * the total and the token are what they must be, whoever ran where. Usage: spawn [WORKERS [ROUNDS]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void worker(MPI_Comm parent, long rounds) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long seed = 0, token = 0, sum = 0;
    MPI_Recv(&seed, 1, MPI_LONG, 0, 0, parent, MPI_STATUS_IGNORE);
    for (long i = 0; i < rounds && size > 1; i++) { /* a ring among the workers: they communicate too */
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_LONG, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, size - 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, rank - 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, (rank + 1) % size, 1, MPI_COMM_WORLD);
        }
    }
    long square = seed * seed;
    MPI_Allreduce(&square, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        long out[2] = {sum, token};
        MPI_Send(out, 2, MPI_LONG, 0, 2, parent);
    }
    MPI_Comm_disconnect(&parent);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    long rounds = argc > 2 ? atol(argv[2]) : 1000;
    if (parent != MPI_COMM_NULL) {
        worker(parent, rounds);
        MPI_Finalize();
        return 0;
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = argc > 1 ? atoi(argv[1]) : size;
    char rounds_arg[32];
    snprintf(rounds_arg, sizeof rounds_arg, "%ld", rounds);
    char n_arg[32];
    snprintf(n_arg, sizeof n_arg, "%d", n);
    char *args[] = {n_arg, rounds_arg, NULL};
    MPI_Comm inter;
    MPI_Comm_spawn(argv[0], args, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    long got[2] = {0, 0};
    if (rank == 0) {
        for (long w = 0; w < n; w++) {
            long seed = w + 1;
            MPI_Send(&seed, 1, MPI_LONG, (int)w, 0, inter);
        }
        MPI_Recv(got, 2, MPI_LONG, 0, 2, inter, MPI_STATUS_IGNORE);
    }
    MPI_Bcast(got, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    long want = (long)n * (n + 1) * (2L * n + 1) / 6, token = n > 1 ? rounds * ((long)n * (n - 1) / 2) : 0;
    int ok = got[0] == want && got[1] == token, okall = 0;
    MPI_Allreduce(&ok, &okall, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Comm_disconnect(&inter);
    if (rank == 0) printf("{\"ok\": %s, \"workers\": %d, \"rounds\": %ld}\n", okall ? "true" : "false", n, rounds);
    MPI_Finalize();
    return okall ? 0 : 1;
}
