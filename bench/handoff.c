/* The raw cost of handing one CPU from one process to another, two ways (bench/handoff.py runs it).
 *
 * Two processes pinned to the same CPU take turns on a shared word `turn`:
 *   futex: the one whose turn ends sets turn, FUTEX_WAKEs the other and FUTEX_WAITs until its turn
 *          comes back (a token hand-off to a rank asleep in the kernel, without lock and bookkeeping);
 *   futex-rt: the same as the runtime does it: SCHED_BATCH, and a 100-ms timeout on every wait;
 *   yield: the one whose turn ends sets turn and calls sched_yield() until its turn comes back (what
 *          MPICH's busy-wait does on a CPU shared by hand, with `taskset`, and what the runtime's
 *          hand-off to a rank that waits by yielding costs).
 * Prints "<mode> <hand-offs> <seconds>" after at least `seconds` of hand-offs.
 *
 *   handoff futex|futex-rt|yield CPU SECONDS
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic int turn;
    _Atomic int stop;
    long count;
} shared_t;

static int timed; /* futex-rt: FUTEX_WAIT with a timeout, as the runtime's sleeps have one */

static long futex(_Atomic int *addr, int op, int val) {
    struct timespec ts = {0, 100000000};
    return syscall(SYS_futex, (int *)addr, op, val, timed && op == FUTEX_WAIT ? &ts : NULL, NULL, 0);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait until it is `me`'s turn. */
static void await_turn(shared_t *s, int me, int use_futex) {
    int t;
    while ((t = atomic_load(&s->turn)) != me) {
        if (use_futex)
            futex(&s->turn, FUTEX_WAIT, t);
        else
            sched_yield();
    }
}

/* Give the turn to the other side. */
static void hand_over(shared_t *s, int me, int use_futex) {
    atomic_store(&s->turn, 1 - me);
    if (use_futex)
        futex(&s->turn, FUTEX_WAKE, 1);
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "futex") && strcmp(argv[1], "futex-rt") && strcmp(argv[1], "yield"))) {
        fprintf(stderr, "usage: handoff futex|futex-rt|yield CPU SECONDS\n");
        return 2;
    }
    int use_futex = strcmp(argv[1], "yield") != 0, cpu = atoi(argv[2]);
    timed = !strcmp(argv[1], "futex-rt");
    if (timed) { /* both sides: the fork below inherits the policy */
        struct sched_param sp = {0};
        if (sched_setscheduler(0, SCHED_BATCH, &sp)) {
            perror("sched_setscheduler");
            return 1;
        }
    }
    double seconds = atof(argv[3]);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) {
        perror("sched_setaffinity");
        return 1;
    }
    shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(s, 0, sizeof *s);
    pid_t child = fork(); /* inherits the affinity: both on `cpu` */
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) { /* side 1: hands every turn straight back until told to stop */
        for (;;) {
            await_turn(s, 1, use_futex);
            if (atomic_load(&s->stop))
                _exit(0);
            hand_over(s, 1, use_futex);
        }
    }
    /* Side 0 plays rounds of 1000 until the time is up, then stops the child (on its turn). */
    double t0 = now(), t1 = t0;
    while (t1 - t0 < seconds) {
        for (int k = 0; k < 1000; k++) {
            await_turn(s, 0, use_futex);
            s->count++;
            hand_over(s, 0, use_futex);
        }
        t1 = now();
    }
    await_turn(s, 0, use_futex);
    long rounds = s->count;
    atomic_store(&s->stop, 1);
    hand_over(s, 0, use_futex);
    int status;
    waitpid(child, &status, 0);
    /* Each round is two hand-offs: 0 -> 1 and 1 -> 0. */
    printf("%s %ld %.6f\n", argv[1], 2 * rounds, t1 - t0);
    return 0;
}
