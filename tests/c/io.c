/* MPI-IO as a solver's checkpoint phase makes it: every round each rank writes its block of a shared
 * file with a collective MPI_File_write_at_all, syncs, reads its neighbour's block back with
 * MPI_File_read_at_all, and writes one more value with MPI_File_iwrite_at and MPI_Wait. The file is
 * made under $TMPDIR (default /tmp) and deleted at the end. Prints {"ok": ..., "rounds": ...} on rank
 * 0; ok: every block read back is the one its owner wrote. Usage: io ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define BLOCK 64 /* values per rank and round */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, ok = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100, id = (long)getpid();
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD); /* one file name for the job */
    char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/vmsched-io-%ld", dir && *dir ? dir : "/tmp", id);
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    int next = (rank + 1) % size;
    for (long i = 0; i < rounds; i++) {
        long mine[BLOCK], theirs[BLOCK], last = i;
        for (int k = 0; k < BLOCK; k++) mine[k] = i * 1000003 + rank * BLOCK + k;
        MPI_Offset slot = (MPI_Offset)(i % 16) * size; /* 16 rounds' blocks, then overwritten */
        MPI_File_write_at_all(fh, (slot + rank) * (MPI_Offset)sizeof mine, mine, BLOCK, MPI_LONG, MPI_STATUS_IGNORE);
        MPI_File_sync(fh);
        MPI_Barrier(MPI_COMM_WORLD); /* sync, barrier, sync: the neighbour's write is visible */
        MPI_File_sync(fh);
        MPI_File_read_at_all(fh, (slot + next) * (MPI_Offset)sizeof theirs, theirs, BLOCK, MPI_LONG, MPI_STATUS_IGNORE);
        for (int k = 0; k < BLOCK; k++) ok &= theirs[k] == i * 1000003 + next * BLOCK + k;
        MPI_Request rq;
        MPI_Offset tail = (16 * (MPI_Offset)size * BLOCK + rank) * (MPI_Offset)sizeof last; /* past the blocks */
        MPI_File_iwrite_at(fh, tail, &last, 1, MPI_LONG, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
    }
    MPI_File_close(&fh);
    if (rank == 0) MPI_File_delete(path, MPI_INFO_NULL);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld}\n", all ? "true" : "false", rounds);
    MPI_Finalize();
    return all ? 0 : 1;
}
