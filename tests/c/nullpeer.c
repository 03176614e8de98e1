/* Receives that no counted message can match: from MPI_PROC_NULL (Irecv + Wait, Recv, Sendrecv, Mprobe +
 * Mrecv) and over an inter-communicator (Irecv + Wait, Recv, Recv_init + Start + Wait, Mprobe + Mrecv,
 * Improbe + Imrecv + Wait), while rank 1 holds one
 * counted message it has not taken yet, sent by rank 0's MPI_Isendrecv (whose receive waits for rank
 * 1's answer). Then rank 1 prints "held" and waits, outside MPI, until the file named by its second
 * argument exists (the test reads the job segment meanwhile), takes the message and answers it with
 * MPI_Isendrecv_replace. Prints {"ok": ..., "rounds": ...} on rank 0. Usage: nullpeer ROUNDS FILE */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, ok = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 100, held = 4242, answer = -1;
    /* Rank 1 alone in one group, the others in the other; each group's rank 0 leads it. */
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 1, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank == 1 ? 0 : 1, 99, &inter);
    MPI_Request rq, prq = MPI_REQUEST_NULL, held_rq = MPI_REQUEST_NULL;
    if (rank == 0) /* counted; taken at the end, and answered */
        MPI_Isendrecv(&held, 1, MPI_LONG, 1, 7, &answer, 1, MPI_LONG, 1, 8, MPI_COMM_WORLD, &held_rq);
    MPI_Barrier(MPI_COMM_WORLD);
    long pv = 0;
    if (rank == 1) MPI_Recv_init(&pv, 1, MPI_LONG, 0, 3, inter, &prq);
    for (long i = 0; i < rounds; i++) {
        long v = -1;
        MPI_Irecv(&v, 1, MPI_LONG, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        MPI_Recv(&v, 1, MPI_LONG, MPI_PROC_NULL, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&i, 1, MPI_LONG, MPI_PROC_NULL, 0, &v, 1, MPI_LONG, MPI_PROC_NULL, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Message msg;
        MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE);
        MPI_Mrecv(&v, 1, MPI_LONG, &msg, MPI_STATUS_IGNORE);
        ok &= v == -1;
        if (rank == 0) { /* to the other group's rank 0: world rank 1, five messages */
            for (int t = 1; t <= 5; t++) MPI_Send(&i, 1, MPI_LONG, 0, t, inter);
        } else if (rank == 1) {
            long a = -1, b = -1, c = -1, d = -1;
            int flag = 0;
            MPI_Irecv(&a, 1, MPI_LONG, 0, 1, inter, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            MPI_Recv(&b, 1, MPI_LONG, 0, 2, inter, MPI_STATUS_IGNORE);
            MPI_Start(&prq);
            MPI_Wait(&prq, MPI_STATUS_IGNORE);
            MPI_Mprobe(0, 4, inter, &msg, MPI_STATUS_IGNORE);
            MPI_Mrecv(&c, 1, MPI_LONG, &msg, MPI_STATUS_IGNORE);
            while (!flag) MPI_Improbe(0, 5, inter, &flag, &msg, MPI_STATUS_IGNORE);
            MPI_Imrecv(&d, 1, MPI_LONG, &msg, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            ok &= a == i && b == i && pv == i && c == i && d == i;
        }
    }
    if (rank == 1) {
        MPI_Request_free(&prq);
        printf("held\n");
        fflush(stdout);
        while (access(argv[2], F_OK) != 0) usleep(10000);
        long x = 0;
        MPI_Isendrecv_replace(&x, 1, MPI_LONG, 0, 8, 0, 7, MPI_COMM_WORLD, &rq); /* sends 0, gets 4242 */
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        ok &= x == held;
    } else if (rank == 0) {
        MPI_Wait(&held_rq, MPI_STATUS_IGNORE);
        ok &= answer == 0;
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    int all = 0;
    MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"ok\": %s, \"rounds\": %ld}\n", all ? "true" : "false", rounds);
    MPI_Finalize();
    return 0;
}
