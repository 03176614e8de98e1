/* Communication patterns as a plain MPI user would write them, with no knowledge of vmsched.
 *
 *     patterns PATTERN ITERS WORK
 *
 * PATTERN: ring (rank r sends to r+1), ring-rev (to r-1), pipeline, master-worker, halo2d, alltoall,
 * random-pairs, tree, halo-rma (a 1-D halo exchanged by MPI_Put between MPI_Win_fence calls),
 * halo-persist (the same stencil, its halo exchanged by persistent requests), groups (each half of the
 * ranks reduces on a communicator of its own, the second half for 4 times the rounds), overlap (each
 * round starts an MPI_Iallreduce, computes while it is in flight, then waits for it), drift (two halves
 * drifting apart: tests/test_runtime_lbd.py's case, not the bench's), halves (halo-persist, then its second
 * half of ranks alone) and ring-odd (a ring, then its odd ranks alone): tests/test_runtime_placement.py's
 * cases. ITERS:
 * rounds; WORK: compute units per rank per round (one unit is a fixed number of arithmetic steps).
 * Rank 0 prints one JSON line: {"pattern", "ok", "checksum", "elapsed_s"}. "ok" is the program's own
 * check (every token, item, task and reduction arrived and adds up); "checksum" depends on the
 * pattern, ITERS, WORK and the rank count only, never on how the ranks were scheduled, so a folded run
 * must print the checksum of the unfolded one.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNIT 2000 /* steps of the generator per work unit */

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Deterministic busy work: `units` * UNIT steps of a generator seeded by `seed`. */
static uint64_t compute(long units, uint64_t seed) {
    uint64_t x = seed | 1;
    for (long i = 0; i < units * UNIT; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static int rank, size;
static volatile uint64_t sink; /* keeps work whose result is not otherwise used */

/* The sum of every rank's `acc` if every rank's check passed, else 0 (the result is then "not ok"). */
static uint64_t agreed_sum(uint64_t acc, int ok) {
    uint64_t total = 0;
    int okall = 0;
    MPI_Allreduce(&acc, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&ok, &okall, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return okall ? total : 0;
}

static uint64_t ring(long iters, long work, int dir) {
    int next = (rank + dir + size) % size, prev = (rank - dir + size) % size;
    uint64_t token = 0, acc = 0;
    for (long lap = 0; lap < iters; lap++) {
        acc ^= compute(work, mix(lap * size + rank));
        if (size == 1) {
            token += 1;
            continue;
        }
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_UINT64_T, next, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_UINT64_T, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += 1;
        } else {
            MPI_Recv(&token, 1, MPI_UINT64_T, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += (uint64_t)rank + 1;
            MPI_Send(&token, 1, MPI_UINT64_T, next, 0, MPI_COMM_WORLD);
        }
    }
    /* every lap adds 1 + 2 + ... + size */
    uint64_t expect = (uint64_t)iters * (uint64_t)size * (uint64_t)(size + 1) / 2, all = 0;
    int ok = rank != 0 || token == expect, okall = 0;
    MPI_Allreduce(&ok, &okall, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Allreduce(&acc, &all, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    return okall ? all ^ expect : 0;
}

static uint64_t stage(uint64_t v, int r) { return mix(v + (uint64_t)r); }

static uint64_t pipeline(long iters, long work) {
    uint64_t sum = 0, expect = 0;
    for (long i = 0; i < iters; i++) {
        uint64_t v = (uint64_t)i;
        if (rank > 0) MPI_Recv(&v, 1, MPI_UINT64_T, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        sink ^= compute(work, v);
        v = stage(v, rank);
        if (rank < size - 1) MPI_Send(&v, 1, MPI_UINT64_T, rank + 1, 0, MPI_COMM_WORLD);
        else sum += v;
    }
    if (rank == size - 1) { /* the same stages applied here, without the work */
        for (long i = 0; i < iters; i++) {
            uint64_t v = (uint64_t)i;
            for (int r = 0; r < size; r++) v = stage(v, r);
            expect += v;
        }
    }
    uint64_t res[2] = {sum, expect};
    MPI_Bcast(res, 2, MPI_UINT64_T, size - 1, MPI_COMM_WORLD);
    return res[0] == res[1] ? res[0] : 0;
}

/* Tasks of uneven size (1 to 9 times WORK), handed out on demand by rank 0. */
static long task_units(long t, long work) { return work * (1 + (long)(mix((uint64_t)t) % 9)); }

static uint64_t master_worker(long iters, long work) {
    long ntasks = iters;
    if (size == 1) {
        uint64_t acc = 0;
        for (long t = 0; t < ntasks; t++) acc += compute(task_units(t, work), (uint64_t)t);
        return acc;
    }
    uint64_t acc = 0;
    int ok = 1;
    if (rank == 0) {
        /* Every message of a worker (one "ready", then one per result) is answered with a task or,
         * once none is left, with a stop; the master ends when every worker has had its stop. */
        char *done = calloc((size_t)ntasks, 1);
        long next = 0, received = 0;
        int stops = 0;
        uint64_t msg[2];
        MPI_Status st;
        while (stops < size - 1) {
            MPI_Recv(msg, 2, MPI_UINT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            if (st.MPI_TAG == 1) { /* a result: task id, value */
                long t = (long)msg[0];
                if (t < 0 || t >= ntasks || done[t]) ok = 0;
                else done[t] = 1;
                acc += msg[1];
                received++;
            }
            long task = next < ntasks ? next++ : -1;
            stops += task < 0;
            MPI_Send(&task, 1, MPI_LONG, st.MPI_SOURCE, 0, MPI_COMM_WORLD);
        }
        ok &= received == ntasks;
        free(done);
    } else {
        uint64_t msg[2] = {0, 0};
        MPI_Send(msg, 2, MPI_UINT64_T, 0, 2, MPI_COMM_WORLD); /* ready */
        for (;;) {
            long task;
            MPI_Recv(&task, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (task < 0) break;
            msg[0] = (uint64_t)task, msg[1] = compute(task_units(task, work), (uint64_t)task);
            MPI_Send(msg, 2, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
        }
    }
    return agreed_sum(acc, ok);
}

#define B 48 /* local block edge of the 2-D stencil */

static uint64_t halo2d(long iters, long work) {
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Cart_coords(cart, rank, 2, coords);
    int up, down, left, right;
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &left, &right);
    static int64_t a[B + 2][B + 2], b[B + 2][B + 2];
    int64_t sendl[B], sendr[B], recvl[B], recvr[B];
    for (int i = 1; i <= B; i++)
        for (int j = 1; j <= B; j++) a[i][j] = (int64_t)(mix((uint64_t)((coords[0] * B + i) * 100003 + coords[1] * B + j)) % 1000);
    uint64_t acc = 0;
    for (long it = 0; it < iters; it++) {
        MPI_Request rq[8];
        for (int i = 0; i < B; i++) sendl[i] = a[i + 1][1], sendr[i] = a[i + 1][B];
        MPI_Irecv(&a[0][1], B, MPI_INT64_T, up, 0, cart, &rq[0]);
        MPI_Irecv(&a[B + 1][1], B, MPI_INT64_T, down, 1, cart, &rq[1]);
        MPI_Irecv(recvl, B, MPI_INT64_T, left, 2, cart, &rq[2]);
        MPI_Irecv(recvr, B, MPI_INT64_T, right, 3, cart, &rq[3]);
        MPI_Isend(&a[B][1], B, MPI_INT64_T, down, 0, cart, &rq[4]);
        MPI_Isend(&a[1][1], B, MPI_INT64_T, up, 1, cart, &rq[5]);
        MPI_Isend(sendr, B, MPI_INT64_T, right, 2, cart, &rq[6]);
        MPI_Isend(sendl, B, MPI_INT64_T, left, 3, cart, &rq[7]);
        MPI_Waitall(8, rq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < B; i++) a[i + 1][0] = recvl[i], a[i + 1][B + 1] = recvr[i];
        for (int i = 1; i <= B; i++)
            for (int j = 1; j <= B; j++) b[i][j] = (a[i - 1][j] + a[i + 1][j] + a[i][j - 1] + a[i][j + 1] + 4 * a[i][j]) % 1000003;
        memcpy(a, b, sizeof a);
        acc ^= compute(work, (uint64_t)(it * size + rank));
    }
    uint64_t local = 0, total = 0, accs = 0;
    for (int i = 1; i <= B; i++)
        for (int j = 1; j <= B; j++) local += (uint64_t)a[i][j] * (uint64_t)((coords[0] * B + i) * 7 + coords[1] * B + j);
    MPI_Allreduce(&local, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&acc, &accs, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    MPI_Comm_free(&cart);
    return total ^ accs;
}

static uint64_t alltoall(long iters, long work) {
    uint64_t *sb = malloc(sizeof(uint64_t) * (size_t)size), *rb = malloc(sizeof(uint64_t) * (size_t)size);
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters; it++) {
        for (int j = 0; j < size; j++) sb[j] = mix((uint64_t)(it * 1000003 + rank * 1009 + j));
        MPI_Alltoall(sb, 1, MPI_UINT64_T, rb, 1, MPI_UINT64_T, MPI_COMM_WORLD);
        for (int j = 0; j < size; j++) {
            ok &= rb[j] == mix((uint64_t)(it * 1000003 + j * 1009 + rank));
            acc += rb[j];
        }
        acc ^= compute(work, (uint64_t)(it * size + rank)) & 0xff;
    }
    free(sb), free(rb);
    return agreed_sum(acc, ok);
}

/* Every round a new random pairing of the ranks (the same on every rank); partners swap a value. */
static uint64_t random_pairs(long iters, long work) {
    int *perm = malloc(sizeof(int) * (size_t)size);
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < size; i++) perm[i] = i;
        uint64_t s = mix((uint64_t)it);
        for (int i = size - 1; i > 0; i--) { /* Fisher-Yates */
            s = mix(s);
            int j = (int)(s % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        int pos = 0;
        while (perm[pos] != rank) pos++;
        int partner = (pos ^ 1) < size ? perm[pos ^ 1] : -1;
        uint64_t mine = mix((uint64_t)(it * 7919 + rank)), theirs = 0;
        acc ^= compute(work, mine);
        if (partner >= 0) {
            MPI_Sendrecv(&mine, 1, MPI_UINT64_T, partner, (int)(it & 0x7fff), &theirs, 1, MPI_UINT64_T, partner,
                         (int)(it & 0x7fff), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            ok &= theirs == mix((uint64_t)(it * 7919 + partner));
            acc += theirs;
        }
    }
    free(perm);
    return agreed_sum(acc, ok);
}

#define N1 4096 /* cells per rank of the 1-D stencils */

/* One step of the 1-D stencil on u[1..N1] (ghost cells u[0], u[N1+1] filled), through v. */
static void stencil1(int64_t *u, int64_t *v) {
    for (int i = 1; i <= N1; i++) v[i] = (u[i - 1] + 2 * u[i] + u[i + 1]) % 1000003;
    memcpy(&u[1], &v[1], sizeof(int64_t) * N1);
}

/* The 1-D stencil's result: its cells weighted by global index, summed, with every rank's work mixed in. */
static uint64_t stencil1_sum(const int64_t *u, uint64_t acc) {
    uint64_t local = 0, total = 0, accs = 0;
    for (int i = 1; i <= N1; i++) local += (uint64_t)u[i] * (uint64_t)(rank * N1 + i);
    MPI_Allreduce(&local, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&acc, &accs, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    return total ^ accs;
}

/* A 1-D stencil whose halo is exchanged one-sidedly, as codes written for RMA do it: each round every
 * rank puts its edge cells into its neighbours' ghost cells between two MPI_Win_fence calls. */
static uint64_t halo_rma(long iters, long work) {
    int64_t *u = malloc(sizeof(int64_t) * (N1 + 2)), *v = malloc(sizeof(int64_t) * (N1 + 2));
    MPI_Win win;
    MPI_Win_create(u, sizeof(int64_t) * (N1 + 2), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int i = 1; i <= N1; i++) u[i] = (int64_t)(mix((uint64_t)(rank * N1 + i)) % 1000);
    uint64_t acc = 0;
    for (long it = 0; it < iters; it++) {
        MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
        MPI_Put(&u[1], 1, MPI_INT64_T, left, N1 + 1, 1, MPI_INT64_T, win); /* my first cell: left's right ghost */
        MPI_Put(&u[N1], 1, MPI_INT64_T, right, 0, 1, MPI_INT64_T, win);    /* my last cell: right's left ghost */
        MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
        stencil1(u, v);
        acc ^= compute(work, (uint64_t)(it * size + rank));
    }
    MPI_Win_free(&win);
    uint64_t sum = stencil1_sum(u, acc);
    free(u), free(v);
    return sum;
}

/* Rounds FROM to TO of the 1-D stencil among the ranks of `comm`, its halo exchanged by persistent requests
 * as stencil codes set them up once (MPI_Recv_init, MPI_Send_init) and start them every round (MPI_Startall,
 * then MPI_Waitall); `acc` with each round's work mixed in. */
static uint64_t persist_rounds(MPI_Comm comm, long from, long to, long work, int64_t *u, int64_t *v, uint64_t acc) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    int left = (me + n - 1) % n, right = (me + 1) % n;
    MPI_Request rq[4];
    MPI_Recv_init(&u[0], 1, MPI_INT64_T, left, 0, comm, &rq[0]);       /* left's last cell */
    MPI_Recv_init(&u[N1 + 1], 1, MPI_INT64_T, right, 1, comm, &rq[1]); /* right's first cell */
    MPI_Send_init(&u[N1], 1, MPI_INT64_T, right, 0, comm, &rq[2]);
    MPI_Send_init(&u[1], 1, MPI_INT64_T, left, 1, comm, &rq[3]);
    for (long it = from; it < to; it++) {
        MPI_Startall(4, rq);
        MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
        stencil1(u, v);
        acc ^= compute(work, (uint64_t)(it * size + rank));
    }
    for (int i = 0; i < 4; i++) MPI_Request_free(&rq[i]);
    return acc;
}

/* The same stencil as halo-rma's, its halo exchanged by persistent requests (persist_rounds). Its checksum
 * is halo-rma's. */
static uint64_t halo_persist(long iters, long work) {
    int64_t *u = malloc(sizeof(int64_t) * (N1 + 2)), *v = malloc(sizeof(int64_t) * (N1 + 2));
    for (int i = 1; i <= N1; i++) u[i] = (int64_t)(mix((uint64_t)(rank * N1 + i)) % 1000);
    uint64_t sum = stencil1_sum(u, persist_rounds(MPI_COMM_WORLD, 0, iters, work, u, v, 0));
    free(u), free(v);
    return sum;
}

/* halo-persist for ITERS rounds, then its second half of ranks alone (a stencil of their own) for 3 times as
 * many, while the first half waits in the final reductions on MPI_COMM_WORLD: a job that a block placement
 * suits at first, and then leaves a CPU to ranks that only wait (cpumanager/lbd.py, "A stalled CPU moves
 * the placement"; tests/test_runtime_placement.py's case, not the bench's). */
static uint64_t halves(long iters, long work) {
    int64_t *u = malloc(sizeof(int64_t) * (N1 + 2)), *v = malloc(sizeof(int64_t) * (N1 + 2));
    for (int i = 1; i <= N1; i++) u[i] = (int64_t)(mix((uint64_t)(rank * N1 + i)) % 1000);
    uint64_t acc = persist_rounds(MPI_COMM_WORLD, 0, iters, work, u, v, 0);
    int g = rank >= size / 2;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, g, rank, &comm);
    if (g) acc = persist_rounds(comm, iters, 4 * iters, work, u, v, acc);
    MPI_Comm_free(&comm);
    uint64_t sum = stencil1_sum(u, acc);
    free(u), free(v);
    return sum;
}

/* A ring for ITERS laps, then its odd ranks alone for as many rounds (halo-persist's stencil, on a
 * communicator of their own), while the even ones wait in the final reductions: a job that r mod P suits at
 * first and then, on 2 CPUs, leaves one CPU to ranks that only wait (cpumanager/lbd.py, "A stalled CPU moves
 * the placement"; tests/test_runtime_placement.py's case, not the bench's). */
static uint64_t ring_odd(long iters, long work) {
    uint64_t laps = ring(iters, work, 1);
    int64_t *u = malloc(sizeof(int64_t) * (N1 + 2)), *v = malloc(sizeof(int64_t) * (N1 + 2));
    for (int i = 1; i <= N1; i++) u[i] = (int64_t)(mix((uint64_t)(rank * N1 + i)) % 1000);
    int g = rank % 2;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, g, rank, &comm);
    uint64_t acc = g ? persist_rounds(comm, 0, iters, work, u, v, 0) : 0;
    MPI_Comm_free(&comm);
    uint64_t sum = stencil1_sum(u, acc);
    free(u), free(v);
    return laps && sum ? laps ^ sum : 0;
}

/* A binomial-tree reduction to rank 0 and a binomial-tree broadcast back, by hand, every round. */
static uint64_t tree(long iters, long work) {
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters; it++) {
        sink ^= compute(work, (uint64_t)(it + rank));
        uint64_t v = (uint64_t)(rank + it);
        for (int step = 1; step < size; step <<= 1) {
            if (rank & step) {
                MPI_Send(&v, 1, MPI_UINT64_T, rank - step, 0, MPI_COMM_WORLD);
                break;
            }
            if (rank + step < size) {
                uint64_t w;
                MPI_Recv(&w, 1, MPI_UINT64_T, rank + step, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                v += w;
            }
        }
        int top = 1;
        while (top < size) top <<= 1;
        for (int step = top >> 1; step >= 1; step >>= 1) {
            if (rank % (2 * step) == 0 && rank + step < size)
                MPI_Send(&v, 1, MPI_UINT64_T, rank + step, 1, MPI_COMM_WORLD);
            else if (rank % (2 * step) == step)
                MPI_Recv(&v, 1, MPI_UINT64_T, rank - step, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        uint64_t expect = (uint64_t)size * (uint64_t)(size - 1) / 2 + (uint64_t)size * (uint64_t)it;
        ok &= v == expect;
        acc += v;
    }
    int okall = 0;
    MPI_Allreduce(&ok, &okall, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return okall ? acc : 0;
}

/* An ensemble of two unequal members: each half of the ranks on a communicator of its own
 * (MPI_Comm_split) reduces a value every round, the second half for four times the rounds of the first, so
 * that the first is done a quarter of the way and waits in the final reductions on MPI_COMM_WORLD. */
static uint64_t groups(long iters, long work) {
    int g = rank >= size / 2, lo = g ? size / 2 : 0, hi = g ? size : size / 2;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, g, rank, &comm);
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters * (1 + 3 * g); it++) {
        uint64_t v = mix((uint64_t)(it * 1000003 + rank)), s = 0, want = 0;
        MPI_Allreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, comm);
        for (int j = lo; j < hi; j++) want += mix((uint64_t)(it * 1000003 + j));
        ok &= s == want;
        acc += s;
        acc ^= compute(work, (uint64_t)(it * size + rank)) & 0xff;
    }
    MPI_Comm_free(&comm);
    return agreed_sum(acc, ok);
}

/* Two halves that drift apart: the even and the odd ranks each reduce on a communicator of their own every
 * round, and rank 0 broadcasts the round on MPI_COMM_WORLD every 8 rounds. For the first quarter of the
 * rounds both halves compute alike; then the odd ones compute twice as long. The broadcast is small
 * (eager), so the even half does not wait for the odd one: it runs ahead, and its broadcasts pile up in
 * the odd ranks' unexpected queues. Balanced at first, slower and slower on local queues later: a change
 * of pace after a job's first second (cpumanager/lbd.py, "Watching a local job"; a program of this shape,
 * written by hand, ran 4x slower there). Balanced for a quarter, not from the start: computing twice as
 * long from the first round, the odd half made the detector's first window read IP 11-17 % (10 runs of
 * 10), and a job whose reverse trial then failed never went to local queues (CI, 2026-12-03). */
static uint64_t drift(long iters, long work) {
    int g = rank % 2;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, g, rank, &comm);
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters; it++) {
        acc ^= compute(work * (1 + (it >= iters / 4 ? g : 0)), (uint64_t)(it * size + rank)) & 0xff;
        uint64_t v = mix((uint64_t)(it * 1000003 + rank)), s = 0, want = 0;
        MPI_Allreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, comm);
        for (int j = g; j < size; j += 2) want += mix((uint64_t)(it * 1000003 + j));
        ok &= s == want;
        acc += s;
        if (it % 8 == 0) {
            long round = rank == 0 ? it : -1;
            MPI_Bcast(&round, 1, MPI_LONG, 0, MPI_COMM_WORLD);
            ok &= round == it;
        }
    }
    MPI_Comm_free(&comm);
    return agreed_sum(acc, ok);
}

/* Communication overlapped with work, as the nonblocking collectives are meant to be used: each round
 * starts the sum of the ranks' values, computes, then waits for the sum (and checks it). */
static uint64_t overlap(long iters, long work) {
    uint64_t acc = 0;
    int ok = 1;
    for (long it = 0; it < iters; it++) {
        uint64_t v = mix((uint64_t)(it * 1000003 + rank)), s = 0, want = 0;
        MPI_Request rq;
        MPI_Iallreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, &rq);
        acc ^= compute(work, (uint64_t)(it * size + rank)) & 0xff;
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        for (int j = 0; j < size; j++) want += mix((uint64_t)(it * 1000003 + j));
        ok &= s == want;
        acc += s;
    }
    return agreed_sum(acc, ok);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: patterns PATTERN ITERS WORK\n");
        MPI_Finalize();
        return 2;
    }
    const char *name = argv[1];
    long iters = atol(argv[2]), work = atol(argv[3]);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    uint64_t sum;
    if (!strcmp(name, "ring")) sum = ring(iters, work, 1);
    else if (!strcmp(name, "ring-rev")) sum = ring(iters, work, -1);
    else if (!strcmp(name, "pipeline")) sum = pipeline(iters, work);
    else if (!strcmp(name, "master-worker")) sum = master_worker(iters, work);
    else if (!strcmp(name, "halo2d")) sum = halo2d(iters, work);
    else if (!strcmp(name, "alltoall")) sum = alltoall(iters, work);
    else if (!strcmp(name, "random-pairs")) sum = random_pairs(iters, work);
    else if (!strcmp(name, "tree")) sum = tree(iters, work);
    else if (!strcmp(name, "halo-rma")) sum = halo_rma(iters, work);
    else if (!strcmp(name, "halo-persist")) sum = halo_persist(iters, work);
    else if (!strcmp(name, "groups")) sum = groups(iters, work);
    else if (!strcmp(name, "overlap")) sum = overlap(iters, work);
    else if (!strcmp(name, "drift")) sum = drift(iters, work);
    else if (!strcmp(name, "halves")) sum = halves(iters, work);
    else if (!strcmp(name, "ring-odd")) sum = ring_odd(iters, work);
    else {
        if (rank == 0) fprintf(stderr, "patterns: unknown pattern %s\n", name);
        MPI_Finalize();
        return 2;
    }
    double elapsed = MPI_Wtime() - t0;
    if (rank == 0)
        printf("{\"pattern\": \"%s\", \"ok\": %s, \"checksum\": \"%016llx\", \"elapsed_s\": %.6f}\n", name,
               sum ? "true" : "false", (unsigned long long)sum, elapsed);
    MPI_Finalize();
    return sum ? 0 : 1;
}
