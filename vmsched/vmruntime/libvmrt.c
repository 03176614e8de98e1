/* vmruntime core: registration, pinning and the token protocol of self-coscheduling (thesis §4.3-4.4).
 *
 * Tokens. A job with partition cpus[0..P) has P tokens; token i belongs to cpus[i]. A rank may run
 * MPI code only while it holds a token (job->holder[i] == rank, rank->has_token == i + 1). Local
 * queues: token i can only go to ranks r with r % P == i (round robin among them). Global queue: any
 * rank of the job, chosen by the job's heuristic (progress, sender, unconsumed, affinity, rr). All
 * token state of a job (holder[], has_token, wake, state of its ranks, rt_*) changes under the job's
 * spin lock rt_lock, which holds the owner's pid so that a lock left by a dead rank can be broken.
 *
 * Memory. The node table (partitions, generations) is the CPU manager's and mapped read-only; what the
 * ranks write - token state and rank slots (slot = MPI rank; per node, its place on the node) - lives
 * in the job's own segment, which only the job's user can open (docs/security.md). No rank takes a
 * lock of the node table.
 *
 * Blocking. A rank whose operation did not complete first tests it again a few times (repolling, in
 * vm_idle: MPICH takes in about one message per progress poll). A rank whose operation still cannot
 * complete hands its token on, sets its own wake word to VM_WAKE_WAIT and state to WAITING (still under
 * the lock), and waits in two phases. On a local queue, if its recent MPI calls waited briefly
 * (fine-grained exchanges), and on the global queue in a counted wait (not a collective) while the LBD
 * measures the job, it first yields its CPU (word VM_WAKE_YIELD) during the first VM_YIELD_WAIT_US of
 * its MPI call, looking at its word between yields (and taking a free token it may take); then it swaps
 * the word to VM_WAKE_SLEEP and sleeps in FUTEX_WAIT(wake, VM_WAKE_SLEEP). The giver of a token swaps
 * the receiver's word to VM_WAKE_RUN and sends a FUTEX_WAKE only if the old value was VM_WAKE_SLEEP: one
 * atomic swap each side, so a wake-up cannot be lost, and a hand-off to a rank that yields costs no
 * system call but the giver's own sched_yield (bench/handoff.py: a yield 1.2 us, a futex wake and wait
 * as the runtime sleeps 3.0 us). A token whose queue-mates all yield is left free, and the first of them
 * that runs and may go on takes it (its awaited message has arrived, or the counters cannot tell): the
 * kernel runs the waiters in turn, so a directed hand-off among them cost one to three wasted yields.
 * The sleep has a timeout: a sleeping rank wakes every VM_WAKE_MS to check the manager, its job and the
 * holders of the tokens (a dead holder's token is reclaimed).
 *
 * Generations. The CPU manager bumps job->generation when the partition or the queue type changes
 * and FUTEX_WAKEs the waiting ranks. The first rank that sees generation != rt_generation rebuilds
 * the tokens for the new partition (current holders keep theirs where the new mapping allows it).
 * A rank that lost its token notices at its next MPI call and blocks there.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vmrt.h"

#define VM_CHECK_NS 200000000LL /* a running rank checks the manager's pid this often (in yields) */
#define VM_RR_EVERY 8           /* every n-th hand-off of a rank is round robin (no starvation) */
#define VM_STALE_US 1000        /* a collective's wait this long, granted a token in vain, is passed over (is_stale) */
#define VM_STALE_KEEP_US 200    /* ... and a holder keeps its token from one for this long at most (keep_from_stale) */
#define VM_POLLS_BEFORE_YIELD 8 /* consecutive empty Test/Iprobe calls before giving way */
#define VM_IDLE_PROGRESS 16     /* consecutive idle ucp_worker_progress calls from libmpi that are a wait */
#define VM_BORROW_MS 5000       /* a token holder that made no MPI call this long may be run beside (borrow) */
#define VM_BORROW_NICE 0        /* a borrower's nice value while it runs without a token (0: its own) */

static vm_rank dummy_rank;     /* counters of an unregistered process */
struct vm_state vm = {.me = &dummy_rank, .rank = -1};

static int cpu_index[VM_MAX_CPUS * 4]; /* OS cpu number -> index in the CPU table */
static cpu_set_t initial_mask;
static __thread int mpi_thread; /* this thread called MPI_Init (no syscall needed to know) */
static int in_cs;              /* this process holds rt_lock (signal handlers must not take it) */
static int debug;
static int64_t last_check_ns;
static void *libmpi_base;
static uintptr_t mpi_text_lo, mpi_text_hi; /* libmpi's executable segment */
static int keyval = MPI_KEYVAL_INVALID;
static const char *stats_path;
static int top_mode;           /* highest mode this rank reached (for stats) */
static unsigned generations;   /* partition/queue generations this rank applied (for stats) */
static const char *off_why = ""; /* why the runtime stopped scheduling this rank (for stats) */
static unsigned reclaimed;     /* tokens of dead holders this rank freed (for stats) */
/* Per node (VMSCHED_PER_NODE=1, set by the Slurm plugin): the job entry holds only this node's ranks,
 * and a rank's slot is its place among them, not its world rank (docs/slurm.md). */
static int per_node;
static int world_rank = -1, world_size;
static int *slot_cache;        /* world rank -> slot on this node, -1 not known (yet) */
static int slots_cached;       /* entries of slot_cache found; all of them: the rest are on other nodes */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() do { } while (0)
#endif

#define DBG(...) do { if (debug) { fprintf(stderr, "vmrt[%d] ", vm.rank); fprintf(stderr, __VA_ARGS__); \
                                   fputc('\n', stderr); } } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* small system helpers                                                                           */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void real_yield(void) { syscall(SYS_sched_yield); }

/* Two-phase waiting and repolling (see Blocking above). For experiments, VMRT_YIELD_WAIT_US overrides the
 * window (0: always sleep at once, the protocol before it), VMRT_YIELD_WAIT_MAX_AVG_US the short-wait
 * rule's bound on a call's average wait, VMRT_REPOLLS and VMRT_REPOLLS_OPAQUE the repolls (0: hand off
 * at the first failed test), VMRT_SKIP_STARVED=0 plain round robin on local queues (next_local),
 * VMRT_MEASURE_YIELD=0 no yielding on the global queue while the LBD measures (yield_wait); read once, in
 * vm_init. */
static int yield_wait_us = VM_YIELD_WAIT_US;
static double yield_wait_max_avg_ns = VM_YIELD_WAIT_MAX_AVG_US * 1000.0;
static int repolls_counted = VM_REPOLLS, repolls_opaque = VM_REPOLLS_OPAQUE;
static int measure_yield = 1;   /* the global queue yields too while the LBD measures (yield_wait) */
static int skip_starved = 1;     /* local round robin passes over starved queue-mates (next_local) */
static int free_starved = 1;     /* global queue: a token nobody but starved ranks could take is freed */
static int borrow_ms = VM_BORROW_MS; /* 0: a waiting rank never runs beside a holder (may_borrow) */
static int stale_us = VM_STALE_US;   /* 0: stale waiters get the token as any other (is_stale) */
static int stale_keep_us = VM_STALE_KEEP_US;
static int borrow_nice = VM_BORROW_NICE;
static int own_session = 1;      /* a folded rank leaves a session it shares with its launcher (leave_session) */
static int base_nice;    /* this rank's nice value before it borrowed */
static int can_unnice;   /* it may raise its priority back (root, or RLIMIT_NICE allows base_nice) */
static int niced;        /* it runs at borrow_nice now */
static double avg_call_wait_ns;  /* moving average of this rank's MPI calls' waits (vm_call_waited) */
static unsigned long call_waits, call_waits_over[2]; /* calls that waited; ... over 30 and over 100 us */
static double call_wait_sum_ns;  /* (for stats) */
static unsigned long token_waits; /* waits for a token (block), each a part of a call's wait (for stats) */
static double token_wait_sum_ns; /* (for stats: what the short-wait rule averaged before vm_call_waited) */
static int all_joined;           /* every rank of the job has registered (see yield_token) */
static unsigned long yields, sleeps, claims; /* waits by yielding, sleeps in the kernel, free tokens taken */
static unsigned long lock_yields, other_yields; /* yields waiting for rt_lock; sched_yield calls passed on */
static __thread unsigned idle_progress; /* idle ucp_worker_progress calls from libmpi in a row */
static unsigned long idle_progresses;   /* ... that reached VM_IDLE_PROGRESS: waits MPICH did not tell us of */
static unsigned long repolls;    /* tests repeated before a hand-off (repolling) */
static unsigned long starved_handoffs; /* hand-offs to a rank that was starved (is_starved) */
static unsigned long coll_waits; /* waits that included a pending nonblocking collective (vm_coll_pending) */
static unsigned long stale_handoffs; /* hand-offs to a rank stale by VM_STALE_US, the rule on or off (is_stale) */
static unsigned long fed_grants; /* free tokens a send granted to its receiver (vm_count_send) */
static unsigned long borrows;    /* times this rank went on without a token beside a stuck holder (may_borrow) */

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void read_tuning(void) {
    yield_wait_us = env_int("VMRT_YIELD_WAIT_US", VM_YIELD_WAIT_US);
    const char *a = getenv("VMRT_YIELD_WAIT_MAX_AVG_US");
    yield_wait_max_avg_ns = (a && *a ? atof(a) : VM_YIELD_WAIT_MAX_AVG_US) * 1000.0;
    repolls_counted = env_int("VMRT_REPOLLS", VM_REPOLLS);
    repolls_opaque = env_int("VMRT_REPOLLS_OPAQUE", VM_REPOLLS_OPAQUE);
    skip_starved = env_int("VMRT_SKIP_STARVED", 1);
    measure_yield = env_int("VMRT_MEASURE_YIELD", 1);
    free_starved = env_int("VMRT_FREE_STARVED", 1);
    borrow_ms = env_int("VMRT_BORROW_MS", VM_BORROW_MS);
    stale_us = env_int("VMRT_STALE_US", VM_STALE_US);
    stale_keep_us = env_int("VMRT_STALE_KEEP_US", VM_STALE_KEEP_US);
    borrow_nice = env_int("VMRT_BORROW_NICE", VM_BORROW_NICE);
    own_session = env_int("VMRT_OWN_SESSION", 1);
    errno = 0;
    base_nice = getpriority(PRIO_PROCESS, 0);
    struct rlimit rl;
    can_unnice = errno == 0 && (geteuid() == 0 || (getrlimit(RLIMIT_NICE, &rl) == 0 &&
                                                   (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)(20 - base_nice))));
}

/* With VMRT_BORROW_NICE above its own nice value, a rank that borrows a CPU (may_borrow) runs at that nice
 * value until it waits for a token again: beside a holder that computes it then takes about 1.5 % of the
 * CPU at nice 19 rather than half. Not by default: the holders a borrower shares its CPUs with may be
 * waiting for it, and ranks that wait hand their tokens round and stay runnable. A Slurm job (ep.W, 4
 * ranks, in the suite under load) stood 150 s with one rank running without a token and 2.45 s of CPU
 * and the other three waiting for it in an Allreduce, 7 million hand-offs each on the job's two CPUs
 * (CI of ad46f26, 2026-11-28): a borrower at nice 19 gets some 0.5 % of a CPU beside three ranks at
 * nice 0. Only where it may raise its priority back (Linux nice values are per thread; an unprivileged
 * thread may lower its nice value only as far as RLIMIT_NICE allows); otherwise at its own priority. */
static void borrow_priority(int low) {
    if (low == niced || !can_unnice || borrow_nice <= base_nice) return;
    if (setpriority(PRIO_PROCESS, 0, low ? borrow_nice : base_nice) == 0) niced = low;
}

/* How long an MPI call that waited for a token waited: from its first hand-off to the last time it got
 * the token back (it completes then). The short-wait rule (yield_wait) reads the average of these, not of
 * each wait for the token: queue-mates that wait for ranks on other CPUs pass the token between them in
 * vain, each holding it a few microseconds, so a call that waits 120 us for its message is made of
 * 10-us waits for the token, and the old rule, fed those, yielded through it (see yield_wait). */
void vm_call_waited(void) {
    int64_t d = vm.wait.resumed > vm.wait.since ? vm.wait.resumed - vm.wait.since : 0;
    avg_call_wait_ns += ((double)d - avg_call_wait_ns) / 8;
    call_waits++;
    call_wait_sum_ns += (double)d;
    call_waits_over[0] += d > 30000;
    call_waits_over[1] += d > 100000;
}

static int futex_wait(uint32_t *addr, uint32_t expected, int timeout_ms) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    /* Shared (not FUTEX_PRIVATE): the CPU manager wakes us from another process. */
    return (int)syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake(uint32_t *addr) { syscall(SYS_futex, addr, FUTEX_WAKE, 1 << 30, NULL, NULL, 0); }

/* Folded ranks run as SCHED_BATCH: a rank woken by a token hand-off then does not preempt the rank
 * that handed it over (and is about to sleep), so a hand-off is one context switch, not two. */
static int batch;

static void set_batch(int on) {
    if (on == batch) return;
    struct sched_param sp = {0};
    if (sched_setscheduler(0, on ? SCHED_BATCH : SCHED_OTHER, &sp) == 0) batch = on;
}

/* A folded rank is a session of its own, as hydra's mpiexec starts every rank. With the kernel's autogroups
 * (/proc/sys/kernel/sched_autogroup_enabled) each session in the root CPU cgroup is scheduled as one group,
 * and the ranks of a job in one group - the tasks of a Slurm step share slurmstepd's session, the ranks of
 * mpiexec.gforker their caller's - starve the other groups on their CPUs while they hand each CPU on
 * thousands of times a second: beside a 4-rank step folded on 2 CPUs of a 2-CPU VM (kernel 6.18) a
 * process pinned to one of them waited 9.7 s, the rest of the job, for the CPU, and the next step's
 * slurmstepd as long (hwloc binds to each CPU in turn); with every rank its own session, at most some
 * milliseconds (docs/vmruntime-journal.md, fifty-ninth session). The job's CPU groups put the ranks in one
 * group as well, which is why they are off by default (cpumanager/cpugroups.py). A rank that leads its
 * process group (Slurm's first task) cannot leave it (EPERM): it stays, alone among the ranks, with its
 * launcher. VMRT_OWN_SESSION=0 leaves every rank where it was started (for experiments). */
static void leave_session(void) {
    if (!own_session || getsid(0) == getpid()) return;
    if (setsid() < 0) DBG("stays in session %d: %s", (int)getsid(0), strerror(errno));
}

static int pid_dead(pid_t pid) { return pid > 0 && kill(pid, 0) == -1 && errno == ESRCH; }

static void pin_to(const int16_t *cpus, int n) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++)
        if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
    if (CPU_COUNT(&set) > 0 && sched_setaffinity(0, sizeof set, &set) != 0) DBG("setaffinity: %s", strerror(errno));
}

/* ---------------------------------------------------------------------------------------------- */
/* locks                                                                                          */

static void job_lock(void) {
    uint32_t mine = (uint32_t)vm.pid;
    for (unsigned spins = 0;; spins++) {
        uint32_t cur = 0;
        if (__atomic_compare_exchange_n(&vm.rt->rt.rt_lock, &cur, mine, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            break;
        if (spins < 64) {
            cpu_relax();
            continue;
        }
        /* The holder may be preempted on our CPU: give it the CPU, and break a dead holder's lock. */
        real_yield();
        lock_yields++;
        if ((spins & 255) == 0 && pid_dead((pid_t)cur) &&
            __atomic_compare_exchange_n(&vm.rt->rt.rt_lock, &cur, mine, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            break;
    }
    in_cs = 1;
}

/* Wake-ups decided under the lock are sent after it is released: a woken rank must not find the
 * lock still held by a waker it has just preempted. So are the pins that go with them (below). */
static uint32_t *pending_wake[VM_MAX_CPUS + 1]; /* NULL: no wake-up, a pin only */
static pid_t pending_pid[VM_MAX_CPUS + 1];
static int pending_cpu[VM_MAX_CPUS + 1]; /* pin the woken rank there first; -1 no */
static int npending;
static int pending_self_cpu = -1;         /* pin this rank there once the lock is released */

static void pin_pid_to(pid_t pid, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < 0 || cpu >= CPU_SETSIZE) return;
    CPU_SET(cpu, &set);
    if (sched_setaffinity(pid, sizeof set, &set) != 0) DBG("setaffinity %d: %s", (int)pid, strerror(errno));
}

static void job_unlock(void) {
    in_cs = 0;
    __atomic_store_n(&vm.rt->rt.rt_lock, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < npending; i++) {
        if (pending_cpu[i] >= 0) pin_pid_to(pending_pid[i], pending_cpu[i]); /* before the wake-up */
        if (pending_wake[i]) futex_wake(pending_wake[i]);
    }
    npending = 0;
    if (pending_self_cpu >= 0) {
        pin_pid_to(0, pending_self_cpu);
        pending_self_cpu = -1;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* the job's ranks                                                                                */

/* Slot of rank r of our job, NULL when it is not (or no longer) registered. */
static vm_rank *rank_entry(int r) {
    if (r < 0 || r >= vm.nranks || !vm.rt) return NULL;
    vm_rank *e = &vm.rt->ranks[r];
    uint32_t st = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    return (st == VM_RANK_RUNNING || st == VM_RANK_WAITING) && e->rank == r && e->pid > 0 ? e : NULL;
}

/* Slot of world rank w: w itself on one node; per node, the slot whose rank wrote w into it, -1 when
 * w runs on another node (or has not registered yet). */
static int slot_of(int w) {
    if (w < 0 || !per_node) return w;
    if (w >= world_size || !slot_cache) return -1;
    if (slot_cache[w] >= 0 || slots_cached >= vm.nranks) return slot_cache[w];
    for (int s = 0; s < vm.nranks; s++) {
        vm_rank *e = rank_entry(s);
        if (e && e->world_rank == w) {
            slot_cache[w] = s;
            slots_cached++;
            return s;
        }
    }
    return -1;
}

/* Per node: take a free slot (the launcher's local rank id first, so slots follow the ranks' order). */
static int claim_slot(void) {
    const char *hint = getenv("MPI_LOCALRANKID"); /* hydra's proxy (mpiexec inside sbatch) */
    if (!hint || !*hint) hint = getenv("SLURM_LOCALID"); /* a task of srun */
    int first = hint ? atoi(hint) : 0;
    for (int k = 0; k < vm.nranks; k++) {
        int s = (first + k) % vm.nranks;
        int32_t none = 0;
        if (s >= 0 && __atomic_compare_exchange_n(&vm.rt->ranks[s].pid, &none, (int32_t)vm.pid, 0, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_RELAXED))
            return s;
    }
    return -1;
}

/* Rank r sleeps for want of a token (it re-tests its operation when it gets one). */
static int is_waiting(int r) {
    vm_rank *e = rank_entry(r);
    return e && __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) == VM_RANK_WAITING && e->has_token == 0;
}

static int cpu_table_index(int cpu) {
    return (cpu >= 0 && cpu < (int)(sizeof cpu_index / sizeof cpu_index[0])) ? cpu_index[cpu] : -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* tokens (caller holds rt_lock)                                                                  */

static int ntokens(void) {
    int p = vm.job->ncpus;
    return p < 0 ? 0 : (p > VM_MAX_CPUS ? VM_MAX_CPUS : p);
}

/* Local queue t's ranks under placement `pl` (job.placement, read once by the caller: the manager may
 * change it under us; the next generation rebuilds the tokens): their first, the stride between them, and
 * how many. Cyclic: t, t+P, t+2P, ... (thesis fig. 3.9); block: ranks t*N/P (rounded up) onward, one
 * after the other. partition.home_cpu in Python is the same rule. */
static int queue_span(int t, int p, uint32_t pl, int *first, int *stride) {
    int64_t n = vm.nranks;
    if (p <= 0 || t < 0 || t >= p) return 0;
    if (pl == VM_PLACE_BLOCK) {
        int64_t lo = ((int64_t)t * n + p - 1) / p, hi = ((int64_t)(t + 1) * n + p - 1) / p;
        *first = (int)lo, *stride = 1;
        return hi > lo ? (int)(hi - lo) : 0;
    }
    *first = t, *stride = p;
    return t < n ? (int)((n - 1 - t) / p + 1) : 0;
}

static uint32_t placement(void) { return __atomic_load_n(&vm.job->placement, __ATOMIC_ACQUIRE); }

/* The local queue (CPU index in the partition) of rank r: r mod P, or r * P / N under block placement. */
static int home_of(int r, int p, uint32_t pl) {
    if (pl == VM_PLACE_BLOCK && r >= 0 && r < vm.nranks) return (int)((int64_t)r * p / vm.nranks);
    return r % p;
}

static int home(int r, int p) { return home_of(r, p, placement()); }

static void grant(int t, int r) {
    vm_rank *e = rank_entry(r);
    if (!e) { /* it vanished: the token stays free for the next waiter */
        vm.rt->rt.holder[t] = -1;
        return;
    }
    vm.rt->rt.holder[t] = r;
    e->has_token = (uint32_t)t + 1;
    int ci = cpu_table_index(vm.job->cpus[t]);
    if (ci >= 0) vm.rt->rt.cpu_running[ci] = r;
    /* Global queue on several CPUs: the rank given token t runs on cpus[t]. Left free over the
     * partition, the kernel often woke it on the CPU it last ran on, behind the rank running there,
     * while the CPU of the token idled (send.50x6, 4 ranks on 2 CPUs: two runnable ranks on one CPU
     * and none on the other in 22 % of samples; on local queues never). Pinned only when it was
     * pinned elsewhere, so that a hand-off between the same CPUs costs no system call. */
    int pin = -1;
    if (vm.job->queue != VM_QUEUE_LOCAL && ntokens() > 1 && e->pinned_to != (uint32_t)vm.job->cpus[t] + 1) {
        pin = vm.job->cpus[t];
        e->pinned_to = (uint32_t)pin + 1;
    }
    /* Only a rank that sleeps in the kernel needs a FUTEX_WAKE; one that yields sees its word change. */
    uint32_t was = __atomic_exchange_n(&e->wake, VM_WAKE_RUN, __ATOMIC_ACQ_REL);
    if (r == vm.rank) {
        if (pin >= 0) pending_self_cpu = pin;
    } else if ((was == VM_WAKE_SLEEP || pin >= 0) && npending < (int)(sizeof pending_wake / sizeof pending_wake[0])) {
        pending_pid[npending] = (pid_t)e->pid, pending_cpu[npending] = pin;
        pending_wake[npending++] = was == VM_WAKE_SLEEP ? &e->wake : NULL;
    }
}

static void count_free(void) {
    int n = 0, p = ntokens();
    for (int t = 0; t < p; t++) n += vm.rt->rt.holder[t] < 0;
    vm.rt->rt.rt_tokens_free = n;
}

/* The rank of slot e waits to receive and nothing has been sent to it yet: given the CPU, it would
 * only test its receive in vain and hand the CPU on. */
static int starved(const vm_rank *e) {
    return e->wait_kind == VM_WAIT_RECV && __atomic_load_n(&e->unconsumed, __ATOMIC_RELAXED) <= 0;
}

static int is_starved(int r) {
    vm_rank *e = rank_entry(r);
    return e && starved(e);
}

/* Rank r waits in a collective or in MPICH's own loop (opaque: the counters cannot tell when it may go
 * on), has done so for stale_us in this MPI call, and was granted a token in it at least once in vain. A
 * rank that is done and waits in the job's last collective while its queue-mates still work was woken
 * at each of their waits, to test once and hand the token back: 4 ranks on 2 CPUs, the even ones in a
 * final MPI_Allreduce on MPI_COMM_WORLD while the odd ones make 100,000 of their own on a communicator of
 * the two, slept some 50,000 times each and ran 0.72 s on the global queue, against 0.094 s plain by
 * taskset; passed over (passed_over) by a holder in a collective of its own, 0.075-0.11 s (README, "Stale
 * waiters"; bench/patterns.py's `groups` is such a job). `us`: the bound (stale_us; VM_STALE_US for the
 * stats, the rule on or off); `now` 0: read the clock, only if the rest holds. */
static int stale_for(int r, int64_t now, int us) {
    vm_rank *e = rank_entry(r);
    if (!e || us <= 0 || e->wait_kind != VM_WAIT_OPAQUE || e->vain_grants == 0) return 0;
    return (now ? now : now_ns()) - e->wait_since > (int64_t)us * 1000;
}

static int is_stale(int r, int64_t now) { return stale_for(r, now, stale_us); }

static int *rank_map(MPI_Comm comm);
static int map_slot(const int *map, int r);

/* Whether slot `c` is a member of the communicator of this rank's collective (1 where it cannot tell). */
static int in_collective(int c) {
    MPI_Comm comm = vm.wait.comm;
    if (comm == MPI_COMM_NULL || comm == MPI_COMM_WORLD) return 1;
    const int *map = rank_map(comm);
    if (!map || map[0] <= 0) return 1; /* no map, or an inter-communicator: it may need anyone */
    for (int i = 0; i < map[0]; i++)
        if (map_slot(map, i) == c) return 1;
    return 0;
}

/* Whether another member of this rank's collective holds a token (runs on another CPU): only then can
 * the collective go on while this rank keeps its token and tests again. */
static int member_runs(void) {
    for (int k = 0; k < ntokens(); k++) {
        int h = vm.rt->rt.holder[k];
        if (h >= 0 && h != vm.rank && in_collective(h)) return 1;
    }
    return 0;
}

/* Whether the holder passes over waiting rank `c`: it is stale, and only a holder in a collective that
 * `c` is no member of does (the holder may need `c` in any other wait, and in a collective it shares with
 * `c` it does: a split job's ranks waited long for each other in their own communicator's MPI_Allreduce,
 * and ran 1.6x as long kept from each other), and not one that has waited as long itself (two stale
 * queue-mates kept the token from each other). */
static int passed_over(int c) {
    if (stale_us <= 0 || vm.wait.comm == MPI_COMM_NULL || vm.wait.comm == MPI_COMM_WORLD) return 0; /* (cheap first) */
    int64_t now = now_ns();
    return is_stale(c, now) && !(vm.wait.since && now - vm.wait.since > (int64_t)stale_us * 1000) &&
           !in_collective(c);
}

/* Choose_next's choice `c`, unless the holder passes it over (passed_over) and has kept its token rather
 * than hand it to such a rank for less than stale_keep_us in this call: then -1, keep it and test again.
 * Bounded, since a rank passed over may be able to go on after all (its own collective may be complete). */
static int keep_from_stale(int c) {
    /* On one CPU, or with the collective's other members all off the CPUs, testing again waits for
     * nothing: groups, 4 ranks on one CPU, ran 1.93 s keeping so against 1.35 s without the rule. */
    if (c < 0 || !passed_over(c) || !member_runs()) return c;
    int64_t now = now_ns();
    if (!vm.wait.kept_since) vm.wait.kept_since = now;
    if (now - vm.wait.kept_since < (int64_t)stale_keep_us * 1000) return -1;
    vm.wait.kept_since = 0;
    return c;
}

/* Round robin among the waiting ranks of local queue t (queue_span: ranks t, t+P, t+2P, ...), starting after
 * rank `after` (from the queue's head when after < 0), never `exclude`; passing over the starved ones
 * while another may go on. Plain round robin walked against a ring that sends to r - 1 (4 ranks on one
 * CPU: each hop woke the two ranks behind it in vain) and through the children of a reduction tree that
 * had not sent yet; passing them over, medians of 3 (bench/patterns.py's runs, 2026-11-26): ring-rev
 * 4x1 0.774 -> 0.633 s, tree 4x1 1.344 -> 1.138, ring 8x2 2.599 -> 1.735, ring-rev 8x2 2.985 -> 2.423,
 * tree 8x2 1.487 -> 1.139, the others within their noise. A rank blocked in a send or in a collective
 * is not passed over: the counters cannot tell whether it may go on (a pipeline's first stage waits in
 * its sends, and skipping those too was no better: 1.08-2.35 s for the reverse ring). Nor is a rank
 * every VM_RR_EVERY-th hand-off (choose_next): a message the counters do not see (over an
 * inter-communicator, from another node) leaves its receiver looking starved, and queue-mates waiting in a
 * collective for it passed the token between them for good (tests/c/uncounted.c). */
static int next_local(int t, int after, int exclude, int pass_starved) {
    int p = ntokens(), f = 0, s = 1;
    uint32_t pl = placement();
    int m = queue_span(t, p, pl, &f, &s);
    if (m <= 0) return -1;
    int idx = (after >= 0 && after < vm.nranks && home_of(after, p, pl) == t) ? (after - f) / s : -1;
    if (idx < 0 || idx >= m) idx = -1;
    int first = -1;
    for (int i = 1; i <= m; i++) {
        int c = f + ((idx + i) % m) * s;
        if (c == exclude || !is_waiting(c)) continue;
        if (!pass_starved || !(is_starved(c) || passed_over(c))) return c;
        if (first < 0) first = c;
    }
    return first;
}

/* Round robin among the waiting ranks; `fed`: only those not starved (a collective, a send, a poll: the
 * counters cannot tell whether they may go on). */
static int next_rr(int exclude, int fed) {
    int start = vm.rt->rt.rt_next, stale = -1; /* stale ranks (is_stale) only if no other */
    if (start < 0 || start >= vm.nranks) start = 0;
    for (int k = 0; k < vm.nranks; k++) {
        int c = (start + k) % vm.nranks;
        if (c != exclude && is_waiting(c) && !(fed && is_starved(c))) {
            if (passed_over(c)) {
                if (stale < 0) stale = c;
                continue;
            }
            vm.rt->rt.rt_next = (c + 1) % vm.nranks;
            return c;
        }
    }
    if (stale >= 0) vm.rt->rt.rt_next = (stale + 1) % vm.nranks;
    return stale;
}

/* Rank r sleeps for want of a token and can go on when it gets one: a message to it has arrived
 * (its senders count it in `unconsumed`), so the operation it re-tests may now complete - unless that
 * operation is a send, which waits for its receiver (a pipeline's stage blocked in a send to the next
 * one has a full queue of messages from the previous one). */
static int is_ready(int r) {
    return is_waiting(r) && rank_entry(r)->wait_kind != VM_WAIT_SEND &&
           __atomic_load_n(&rank_entry(r)->unconsumed, __ATOMIC_RELAXED) > 0;
}

/* The ready rank with the most unconsumed messages, looking from the rank after `me` in rank order
 * (ties go to the nearest: in a pipeline or a ring that is the one we just fed). */
static int next_ready(int me) {
    int best = -1;
    int64_t most = 0;
    for (int k = 1; k < vm.nranks; k++) {
        int c = (me + k) % vm.nranks;
        if (!is_ready(c)) continue;
        int64_t u = __atomic_load_n(&rank_entry(c)->unconsumed, __ATOMIC_RELAXED);
        if (u > most) most = u, best = c;
    }
    return best;
}

static int next_unconsumed(int exclude) {
    int best = -1;
    int64_t most = 0;
    for (int c = 0; c < vm.nranks; c++) {
        if (c == exclude || !is_waiting(c)) continue;
        int64_t u = __atomic_load_n(&rank_entry(c)->unconsumed, __ATOMIC_RELAXED);
        if (u > most) most = u, best = c;
    }
    return best;
}

/* Local queue t: whether it has waiting ranks other than `me` and all of them wait by yielding. */
static int mates_all_yield(int t, int me) {
    int p = ntokens(), seen = 0, f = 0, s = 1;
    int m = queue_span(t, p, placement(), &f, &s);
    for (int i = 0; i < m; i++) {
        int c = f + i * s;
        if (c == me || !is_waiting(c)) continue;
        if (__atomic_load_n(&rank_entry(c)->wake, __ATOMIC_ACQUIRE) != VM_WAKE_YIELD) return 0;
        seen = 1;
    }
    return seen;
}

#define VM_FREE_IT (-3) /* choose_next: only starved ranks wait; free the token */

/* Another rank holds a token (it runs, and its next send grants a freed token to its receiver). With
 * none, a token freed would leave every rank asleep until one timed out (VM_WAKE_MS): a rank judged
 * starved may wait for a message the counters did not see. */
static int another_runs(int t) {
    for (int k = 0; k < ntokens(); k++)
        if (k != t && vm.rt->rt.holder[k] >= 0 && vm.rt->rt.holder[k] != vm.rank) return 1;
    return 0;
}

/* A rank that could take token t runs without a token (it borrowed a CPU, or a new partition revoked its
 * token): the holder of t, with nobody waiting, frees t and sleeps rather than poll on beside it, taking
 * half the CPU (or nearly all of it from a borrower at a low priority, VMRT_BORROW_NICE). */
static int borrower_runs(int t) {
    int p = ntokens(), local = vm.job->queue == VM_QUEUE_LOCAL && p > 0;
    uint32_t pl = placement();
    for (int r = 0; r < vm.nranks; r++) {
        if (local && home_of(r, p, pl) != t) continue;
        vm_rank *e = r != vm.rank ? rank_entry(r) : NULL;
        if (e && __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) == VM_RANK_RUNNING && e->has_token == 0) return 1;
    }
    return 0;
}

/* Which rank gets our token t (thesis §4.3.1); -1: nobody is waiting for one. */
static int choose_next(int t, int waiting_for) {
    int me = vm.rank, c = -1;
    /* Every few hand-offs go plain round robin, so that two ranks that keep choosing each other cannot
     * starve a third one (and on local queues, a rank that only looks starved is not passed over). */
    int rr_turn = vm.me->ctx_switches % VM_RR_EVERY == VM_RR_EVERY - 1;
    /* Local queues: round robin among the queue-mates, passing over the starved (next_local). Their
     * `progress` rule (the rank we wait for or one whose message has arrived first) was tried and
     * dropped: 4 ranks on one CPU, medians of 3, halo2d 1.58x, random pairs 1.17x, master-worker
     * 1.03-1.18x, the pipeline 1.08-1.9x the time of round robin; tried again with repolling
     * (2026-11-26): the pipeline still 1.79x (its first stage, blocked in sends, is never "ready"),
     * halo2d 1.22x, tree 1.13x. Round robin keeps every stage of a pipeline moving. */
    if (vm.job->queue == VM_QUEUE_LOCAL)
        return keep_from_stale(next_local(t, me, me, skip_starved && !rr_turn));
    if (rr_turn) return keep_from_stale(next_rr(me, 0));
    switch (vm.job->heuristic) {
    case VM_HEUR_PROGRESS:
        /* The rank we wait for, if it can go on; else a rank that can; else the one we wait for unless
         * it is starved (a collective or a rendezvous may need it); else round robin among the ranks
         * that are not starved; else, if another rank runs, nobody: the token is freed, and that rank's
         * next send grants it to its receiver (vm_count_send); else round robin. The plain sender rule
         * hands the token to a sender that itself waits for its own sender, so in a ring it walks
         * backwards. Handing a token to a starved rank woke it to test in vain and hand it on: a ring of
         * 4 on 2 CPUs (one message in flight) made 1.4 such hand-offs per rank and lap and 1.9 sleeps,
         * 0.13 and 1.0 with the token freed (VMRT_FREE_STARVED=0 restores the old rule). */
        if (waiting_for >= 0 && waiting_for != me && is_ready(waiting_for)) return waiting_for;
        c = next_ready(me);
        if (c < 0 && waiting_for >= 0 && waiting_for != me && is_waiting(waiting_for) &&
            !(free_starved && is_starved(waiting_for)))
            c = waiting_for;
        if (c < 0 && free_starved) {
            c = next_rr(me, 1);
            if (c < 0 && another_runs(t)) return VM_FREE_IT;
        }
        break;
    case VM_HEUR_SENDER:
        if (waiting_for >= 0 && waiting_for != me && is_waiting(waiting_for)) return waiting_for;
        c = next_unconsumed(me);
        break;
    case VM_HEUR_UNCONSUMED:
        c = next_unconsumed(me);
        break;
    case VM_HEUR_AFFINITY: {
        int ci = cpu_table_index(sched_getcpu());
        if (ci >= 0) {
            int last = vm.rt->rt.cpu_last[ci];
            vm.rt->rt.cpu_last[ci] = me;
            if (last >= 0 && last != me && is_waiting(last)) return last;
        }
        c = next_unconsumed(me);
        break;
    }
    default:
        break;
    }
    return keep_from_stale(c >= 0 ? c : next_rr(me, 0));
}

/* Give every free token to a waiting rank that may take it (this rank included). */
static void distribute_free(void) {
    int p = ntokens();
    for (int t = 0; t < p; t++) {
        if (vm.rt->rt.holder[t] >= 0) continue;
        int c = vm.job->queue == VM_QUEUE_LOCAL ? next_local(t, -1, -1, skip_starved) : next_rr(-1, 0);
        if (c >= 0) grant(t, c);
    }
    count_free();
}

/* Take a free token for ourselves (a rank about to wait takes one if there is one). */
static int take_free(void) {
    int p = ntokens();
    if (vm.me->has_token) return 1;
    if (vm.job->queue == VM_QUEUE_LOCAL) {
        int t = p > 0 ? home(vm.rank, p) : -1;
        if (t >= 0 && vm.rt->rt.holder[t] < 0) {
            grant(t, vm.rank);
            count_free();
            return 1;
        }
        return 0;
    }
    for (int t = 0; t < p; t++)
        if (vm.rt->rt.holder[t] < 0) {
            grant(t, vm.rank);
            count_free();
            return 1;
        }
    return 0;
}

static int holder_alive(int t) {
    int h = vm.rt->rt.holder[t];
    vm_rank *e = rank_entry(h);
    return e && e->has_token == (uint32_t)t + 1 && !pid_dead(e->pid);
}

/* Free the tokens of dead holders; they go to waiting ranks. */
static void reclaim_dead(void) {
    int p = ntokens(), freed = 0;
    for (int t = 0; t < p; t++)
        if (vm.rt->rt.holder[t] >= 0 && !holder_alive(t)) {
            DBG("token %d of dead rank %d reclaimed", t, vm.rt->rt.holder[t]);
            vm.rt->rt.holder[t] = -1;
            freed = 1;
            reclaimed++;
        }
    if (freed) distribute_free();
}

/* New partition or queue type: P tokens, kept by current holders where the mapping allows. */
static void rebuild(void) {
    uint32_t gen = __atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE);
    int p = ntokens(), local = vm.job->queue == VM_QUEUE_LOCAL;
    uint32_t pl = placement();
    for (int t = 0; t < VM_MAX_CPUS; t++) vm.rt->rt.holder[t] = -1;
    /* The ranks pin themselves to the new partition, and the manager re-pins them: no pin is known. */
    for (int r = 0; r < vm.nranks; r++) {
        vm_rank *e = rank_entry(r);
        if (e) e->pinned_to = 0;
    }
    for (int r = 0; r < vm.nranks; r++) {
        vm_rank *e = rank_entry(r);
        if (!e || e->has_token == 0) continue;
        int keep = -1;
        if (p > 0 && !pid_dead(e->pid)) {
            if (local) {
                int h = home_of(r, p, pl);
                keep = vm.rt->rt.holder[h] < 0 ? h : -1;
            } else {
                int old = (int)e->has_token - 1;
                if (old < p && vm.rt->rt.holder[old] < 0) keep = old;
                for (int t = 0; keep < 0 && t < p; t++)
                    if (vm.rt->rt.holder[t] < 0) keep = t;
            }
        }
        if (keep >= 0) {
            vm.rt->rt.holder[keep] = r;
            e->has_token = (uint32_t)keep + 1;
        } else {
            e->has_token = 0; /* revoked: it blocks at its next MPI call */
        }
    }
    distribute_free();
    vm.rt->rt.rt_generation = gen;
    DBG("tokens rebuilt: generation %u, %d tokens, %s queue, %d free", gen, p, local ? "local" : "global",
        vm.rt->rt.rt_tokens_free);
}

static void sync_tokens(void) {
    if (vm.rt->rt.rt_generation != __atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE)) rebuild();
}

/* Give our token to the next waiting rank, or free it. */
static void release_token(void) {
    int t = (int)vm.me->has_token - 1;
    if (t < 0) return;
    vm.me->has_token = 0;
    if (vm.rt->rt.holder[t] == vm.rank) {
        vm.rt->rt.holder[t] = -1;
        int c = t < ntokens() ? choose_next(t, -1) : -1;
        if (c >= 0) grant(t, c);
    }
    count_free();
}

/* ---------------------------------------------------------------------------------------------- */
/* leaving control                                                                                */

/* Stop scheduling for good: the job runs as plain MPI from here on (unpinned). */
static void go_off(const char *why) {
    if (vm.mode == VM_OFF) return;
    DBG("runtime off: %s", why);
    off_why = why;
    if (niced) borrow_priority(0);
    vm.mode = VM_OFF;
    vm.job = NULL;
    sched_setaffinity(0, sizeof initial_mask, &initial_mask);
    set_batch(0);
}

/* Our job entry and our slot still belong to us (the job may have been released under us). */
static int job_valid(void) {
    return vm.job && vm.job->state != VM_JOB_FREE && vm.job->job_id == vm.job_id &&
           vm.me->job_id == vm.job_id && vm.me->pid == vm.pid && vm.me->rank == vm.rank &&
           (vm.me->state == VM_RANK_RUNNING || vm.me->state == VM_RANK_WAITING);
}

static void detach_slot(void) {
    dummy_rank = *vm.me;
    vm.me = &dummy_rank;
    vm.registered = 0;
}

/* The manager shut down (it sets the flag before it exits): go on as plain MPI. */
static int manager_shut_down(void) {
    if (!__atomic_load_n(&vm.seg->header.shutdown, __ATOMIC_ACQUIRE)) return 0;
    go_off("CPU manager shut down");
    return 1;
}

static int world_ok(void) {
    if (manager_shut_down()) return 0;
    if (!job_valid()) {
        go_off("job no longer in the table");
        detach_slot();
        return 0;
    }
    return 1;
}

static void check_manager(void) {
    last_check_ns = now_ns();
    /* The flag first, or a rank that finds the pid gone before it looks at the flag reports an orderly
     * shutdown as a crash. */
    if (!manager_shut_down() && pid_dead(vm.seg->header.manager_pid)) go_off("CPU manager died");
}

/* ---------------------------------------------------------------------------------------------- */
/* generation changes, waiting, yielding                                                          */

void vm_generation_changed(void) {
    if (!vm.job) return;
    uint32_t gen = __atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE);
    if (!world_ok()) return;
    int p = vm.job->ncpus, n = vm.nranks;
    if (p <= 0) {
        vm.mode = VM_FAST; /* no partition (yet): nothing to schedule */
        vm.seen_gen = gen;
        return;
    }
    if (vm.job->queue == VM_QUEUE_LOCAL || p >= n) /* local queue, or MPL 1: a CPU of its own */
        pin_to(&vm.job->cpus[home(vm.rank, p)], 1);
    else
        pin_to(vm.job->cpus, p);
    vm.me->pinned_to = 0; /* to the token's CPU again at its next grant (global queue) */
    vm.spin_us = vm.job->spin_us;
    vm.mode = p < n ? VM_CTL : VM_FAST;
    set_batch(vm.mode == VM_CTL);
    if (vm.mode == VM_CTL && vm.registered) __atomic_fetch_or(&vm.me->flags, VM_RFLAG_SCHEDULED, __ATOMIC_RELEASE);
    if (vm.mode > top_mode) top_mode = vm.mode;
    job_lock();
    sync_tokens();
    job_unlock();
    vm.seen_gen = gen;
    generations++;
    DBG("generation %u: %d CPUs for %d ranks, mode %s", gen, p, n, vm.mode == VM_CTL ? "ctl" : "fast");
}

/* The holder of a token this rank may take has made no MPI call for borrow_ms or more (lock held). Seen
 * at this rank's sleep timeouts: the holder and its call count when they were first seen unchanged. */
static int holder_stuck(void) {
    static struct {
        int holder1; /* the holder + 1; 0: none seen */
        uint64_t calls;
        int64_t since;
    } seen[VM_MAX_CPUS];
    int p = ntokens(), local = vm.job->queue == VM_QUEUE_LOCAL, stuck = 0;
    int64_t now = now_ns();
    for (int t = local && p > 0 ? home(vm.rank, p) : 0; t < p; t++) {
        int h = vm.rt->rt.holder[t];
        vm_rank *e = h != vm.rank ? rank_entry(h) : NULL;
        uint64_t calls = e ? __atomic_load_n(&e->mpi_calls, __ATOMIC_RELAXED) : 0;
        if (!e || __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != VM_RANK_RUNNING) {
            seen[t].holder1 = 0;
        } else if (seen[t].holder1 != h + 1 || seen[t].calls != calls) {
            seen[t].holder1 = h + 1, seen[t].calls = calls, seen[t].since = now;
        } else if (now - seen[t].since >= (int64_t)borrow_ms * 1000000) {
            stuck = 1;
        }
        if (local) break;
    }
    return stuck;
}

/* A rank that waits for a token may go on without one, beside the holder, when it could go on (it is not
 * starved) and the holder of a token it may take has made no MPI call for borrow_ms: the runtime never
 * takes a token back from a rank that runs, and a holder polling memory with no MPI call at all waits for
 * a rank that has no CPU (tests/c/memspin.c: a ring of flags in a shared window, 4 ranks on one CPU,
 * hung for good). The kernel then shares the CPU between the two, as it would unfolded; the borrower
 * runs until its next MPI call, which waits for a token again (as a rank does whose token was revoked
 * by a new partition). Nothing tells a holder that polls from one that computes, and a computing one
 * shared its CPU with the borrowers whose operations had completed: ep.W, 4 ranks on one CPU (whole
 * seconds between MPI calls), ran 0-40 % longer in 6 of 7 paired runs when they borrowed after 100 ms at
 * its priority, and 10-11 % longer after 2 s (2026-11-28). At a low priority (borrow_priority, with the
 * holder it runs beside freeing its token rather than poll on: borrower_runs) borrowers still shared the
 * CPU among themselves once the holder blocked, and ep.W ran 2-45 % longer after 500 ms (8 ranks on 2
 * CPUs: +40, +16, +2 %); and a low priority starves a borrower that ranks waiting for it poll beside
 * (see borrow_priority), so borrowers keep theirs by default. Hence 5 s: a job whose ranks compute longer
 * than that between MPI calls is time-shared from then on, and a program that polls memory waits 5 s
 * each time a folded rank must run first. VMRT_BORROW_MS sets the wait (0: never borrow). */
static int may_borrow(void) {
    return borrow_ms > 0 && !vm.me->has_token && !starved(vm.me) && holder_stuck();
}

/* Look around under the lock: a new generation, a free token we may take; after a sleep that timed out,
 * dead holders, and whether to go on without a token (may_borrow; 1: this rank runs, it has no token). */
static int look_around(int timed_out) {
    job_lock();
    sync_tokens();
    if (timed_out) reclaim_dead();
    if (!vm.me->has_token && take_free()) claims++;
    int borrow = timed_out && may_borrow();
    if (borrow) {
        vm.me->state = VM_RANK_RUNNING; /* not waiting: nobody grants it a token until it waits again */
        borrows++;
    }
    job_unlock();
    return borrow;
}

/* What the current wait is for (the slot's wait_kind): a collective, a poll or a token (opaque: the
 * counters cannot tell), a receive (messages sent to us may complete it), or sends only. */
static int wait_kind(void) {
    return vm.wait.opaque ? VM_WAIT_OPAQUE : vm.wait.recv ? VM_WAIT_RECV : VM_WAIT_SEND;
}

/* First phase of a wait: yield the CPU until our word says we hold a token, a free token of our local
 * queue is ours to take, or the window ends. The window is the MPI call's, not each wait's: queue-mates
 * that pass a free token between them while both wait for a rank on another CPU go to sleep once the
 * call has waited that long (a balanced send.S cycled so for its whole 8.5-ms exchanges). Only for a
 * rank whose MPI calls have waited briefly: ranks are their own sessions under mpiexec, so with the
 * kernel's autogroups each one that yields still gets its share of the CPU, which a long wait would
 * take from the rank computing beside it (master-worker with uneven tasks ran 1.37x longer when every
 * wait yielded for its window). */
static void yield_wait(void) {
    /* Only ranks whose calls have waited briefly. In autogroups a rank that yields keeps its share
     * against a sibling that computes (master-worker with uneven tasks, every wait yielding: 1.47x as
     * long); in a job's CPU group it does not (+0-4 %), but a longer bound there (the 100-us window) made
     * queue-mates waiting for the other CPU yield to each other: a ring of 4 on 2 CPUs 0.47 -> 0.66 s.
     * The average is of whole calls' waits (vm_call_waited): fed each wait for the token instead, a ring
     * of 16 on 8 CPUs of a 16-core machine (each call waits 15 hops, ~120 us, while the two queue-mates
     * pass the token between them) yielded through its waits and ran 2.2x as long as sleeping at once
     * (2.41 s against 1.08 s; plain MPICH by taskset 0.81 s; this rule itself is not measured there
     * yet). On 2 CPUs the two averages choose alike but for a few medium-grained cases (8 ranks of a
     * tree, of random pairs, of an all-to-all), whose times moved within their noise. */
    uint32_t phase = __atomic_load_n(&vm.job->lbd_phase, __ATOMIC_RELAXED);
    int measuring =
        measure_yield && vm.job->queue != VM_QUEUE_LOCAL && (phase == VM_LBD_MEASURING || phase == VM_LBD_STABLE) &&
        !vm.wait.opaque;
    if (yield_wait_us <= 0 || (!measuring && avg_call_wait_ns >= yield_wait_max_avg_ns)) return;
    /* Otherwise local queues only: on the global queue a rank's CPU time must stay its work (the LBD reads
     * idleness from it there), and one that yields takes CPU from the rank computing beside it (a
     * balanced send.S read IP 7-8 % in every re-check window, above the 7 % that moves it to local queues).
     * But while the LBD measures (the first window, and a decided-local job's re-measure windows) the
     * global queue yields too, whatever the average, in waits the counters can judge (a receive, a send):
     * there the average cannot tell. Asleep at once, a ring of 4 on 2 CPUs waits 35-80 us per call on the
     * global queue (each hop wakes a rank on an idle CPU), above the 30-us bound, so the rule kept it
     * asleep; yielding, its calls wait 11 us (20,000 laps: 1.78 s asleep, 0.29 s yielding, local queues
     * 0.155 s; 2026-11-28, a 2-CPU AMD EPYC VM). That window is what a fine-grained job pays before it
     * reaches local queues: default / local queues, ring 4x2 1.106 -> 1.044, ring-rev 4x2 1.23 -> 1.12
     * (medians of 5 and 4). The yields are CPU time the LBD reads as work, at most the window's 100 us per
     * call: nothing to jobs whose waits are long (send.50x6 read IP 39-40 % either way, a balanced send.S
     * 3.1-3.5 % against 3.2-4.2 %); fine-grained ones read less, towards local queues, which their local
     * trial then judges as before. Not in collectives and MPICH's own loops (opaque waits), whose holders
     * progress the collective while a rank yields beside them: an all-to-all of 0.3 s, 4x2, medians of 6:
     * 0.262 s asleep, 0.289 s yielding in every wait, 0.269 s yielding in counted waits only; a ring 1.526
     * and 1.515 s. */
    if (vm.job->queue != VM_QUEUE_LOCAL && !measuring) return;
    int64_t until = vm.wait.since + (int64_t)yield_wait_us * 1000;
    uint32_t w = VM_WAKE_WAIT;
    if (now_ns() >= until ||
        !__atomic_compare_exchange_n(&vm.me->wake, &w, VM_WAKE_YIELD, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* too late in this call, or the token came meanwhile */
    do {
        real_yield();
        yields++;
        if (__atomic_load_n(&vm.me->wake, __ATOMIC_ACQUIRE) == VM_WAKE_RUN) return;
        int p = ntokens();
        /* Take a free token of our queue only if we may go on: our message has arrived, or the counters
         * cannot tell (a collective, a poll, a send); otherwise the queue-mate whose message has arrived runs. */
        int mine = p > 0 && vm.job->queue == VM_QUEUE_LOCAL && vm.rt->rt.holder[home(vm.rank, p)] < 0 && !starved(vm.me);
        if (vm.job->queue != VM_QUEUE_LOCAL && !starved(vm.me)) /* global: any free token */
            mine = __atomic_load_n(&vm.rt->rt.rt_tokens_free, __ATOMIC_ACQUIRE) > 0;
        if (mine || __atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE) != vm.rt->rt.rt_generation) {
            look_around(0);
            if (vm.me->has_token) return;
        }
    } while (now_ns() < until);
    /* The window has ended with our word still YIELD: block() swaps it to SLEEP and looks around. */
}

/* Wait until our wake word says we hold a token (or control ends): yielding first, then asleep. */
static void block(void) {
    int64_t t0 = now_ns();
    if (!vm.wait.since) vm.wait.since = t0;
    yield_wait();
    for (;;) {
        uint32_t w = __atomic_load_n(&vm.me->wake, __ATOMIC_ACQUIRE);
        if (w == VM_WAKE_RUN) break;
        /* -> SLEEP, so that a giver knows to wake us; a failed swap means the token came meanwhile.
         * Coming from YIELD, look under the lock once: a giver that saw YIELD may have left its token
         * free for us, and nobody else may be awake to take it. */
        if (w != VM_WAKE_SLEEP) {
            uint32_t was = w;
            if (__atomic_compare_exchange_n(&vm.me->wake, &w, VM_WAKE_SLEEP, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
                was == VM_WAKE_YIELD)
                look_around(0);
            continue;
        }
        sleeps++;
        int rc = futex_wait(&vm.me->wake, VM_WAKE_SLEEP, VM_WAKE_MS);
        int err = rc == -1 ? errno : 0;
        if (!world_ok()) return;
        if (err == ETIMEDOUT) {
            check_manager();
            if (vm.mode == VM_OFF) return;
        }
        if (__atomic_load_n(&vm.me->wake, __ATOMIC_ACQUIRE) == VM_WAKE_RUN) break;
        /* Woken by the manager (new generation) or a timeout: look around under the lock. */
        if (look_around(err == ETIMEDOUT)) { /* borrowed: it goes on without a token */
            borrow_priority(1);
            break;
        }
    }
    vm.wait.resumed = now_ns();
    vm.wait.grants++;
    token_waits++;
    token_wait_sum_ns += (double)(vm.wait.resumed - t0);
    if (!world_ok()) return;
    vm.me->state = VM_RANK_RUNNING;
    vm.me->cpu = sched_getcpu();
    if (__atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE) != vm.seen_gen) vm_generation_changed();
}

/* Mark ourselves waiting (lock held) and sleep; returns holding a token or out of control. */
static void wait_locked(int waiting_for) {
    vm.me->waiting_for = waiting_for;
    vm.me->wait_kind = wait_kind();
    if (!vm.wait.since) vm.wait.since = now_ns();
    vm.me->wait_since = vm.wait.since; /* (is_stale) */
    vm.me->vain_grants = (uint32_t)vm.wait.grants;
    __atomic_store_n(&vm.me->wake, VM_WAKE_WAIT, __ATOMIC_RELAXED);
    __atomic_store_n(&vm.me->state, VM_RANK_WAITING, __ATOMIC_RELEASE);
    job_unlock();
    vm.me->ctx_switches++;
    block();
}

void vm_wait_token(int waiting_for) {
    if (niced) borrow_priority(0);
    if (vm.mode != VM_CTL || !world_ok()) return;
    vm.wait.opaque = 1; /* it waits for a token only */
    job_lock();
    sync_tokens();
    if (vm.me->has_token || take_free()) {
        job_unlock();
        return;
    }
    wait_locked(waiting_for);
}

/* Whether every rank of the job has entered the token protocol (then stays so: a rank that left, or a
 * process registered through the API, which takes no part in it, counts as joined). */
static int job_joined(void) {
    for (int r = 0; !all_joined && r < vm.nranks; r++) {
        const vm_rank *e = &vm.rt->ranks[r];
        uint32_t st = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
        uint32_t fl = __atomic_load_n(&e->flags, __ATOMIC_ACQUIRE);
        if (st != VM_RANK_DONE && !(fl & (VM_RFLAG_SCHEDULED | VM_RFLAG_EXTERNAL))) return 0;
    }
    return all_joined = 1;
}

/* The operation is not complete: hand our token to the next rank and block (thesis fig. 4.6). */
static void yield_token(int waiting_for) {
    idle_progress = 0;
    if (niced) borrow_priority(0);
    if (__atomic_load_n(&vm.job->generation, __ATOMIC_ACQUIRE) != vm.seen_gen) vm_generation_changed();
    if (vm.mode != VM_CTL) return;
    if (now_ns() - last_check_ns > VM_CHECK_NS) {
        check_manager();
        if (vm.mode != VM_CTL || !world_ok()) return;
    }
    /* Until every rank has entered the token protocol, wait as plain MPI does. A rank on its way there
     * (in MPI_Init, or registered and pinning itself) runs as a plain process, and three ranks that
     * handed the token round at the first barrier, asleep in turn, kept it from the CPU: it stayed
     * runnable for 12 minutes with 58 ms of CPU (4 ranks on one CPU; seen once in some 40 runs). */
    if (!all_joined && !job_joined()) {
        real_yield();
        return;
    }
    job_lock();
    sync_tokens();
    int t = (int)vm.me->has_token - 1;
    if (t >= 0 && vm.job->queue == VM_QUEUE_LOCAL && mates_all_yield(t, vm.rank)) {
        /* Its queue-mates all wait by yielding: the first that runs and may go on takes the token (one
         * that sleeps, or has not decided yet, gets it by a directed hand-off below, round robin, so
         * none is passed over). */
        vm.me->has_token = 0;
        vm.rt->rt.holder[t] = -1;
        count_free();
        wait_locked(waiting_for);
        return;
    }
    if (t >= 0) {
        int next = choose_next(t, waiting_for);
        if (next < 0 && borrower_runs(t)) next = VM_FREE_IT;
        if (next == VM_FREE_IT) { /* only starved ranks wait, or a borrower runs: free it (a sender grants it) */
            vm.rt->rt.holder[t] = -1;
            count_free();
            /* Free and waiting before we look at our own count (all sequentially consistent): a send to us
             * counted before that found us running and granted nothing, so we see its count and keep the
             * token; one counted after finds us waiting and a token free, and grants it once we unlock. */
            __atomic_store_n(&vm.me->has_token, 0, __ATOMIC_SEQ_CST);
            __atomic_store_n(&vm.me->state, VM_RANK_WAITING, __ATOMIC_SEQ_CST);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (__atomic_load_n(&vm.me->unconsumed, __ATOMIC_SEQ_CST) > 0) {
                vm.me->state = VM_RANK_RUNNING;
                vm.me->has_token = (uint32_t)t + 1;
                vm.rt->rt.holder[t] = vm.rank;
                count_free();
                job_unlock();
                return;
            }
            wait_locked(waiting_for);
            return;
        }
        if (next < 0) { /* nobody could use the CPU instead: keep it and poll again */
            job_unlock();
            return;
        }
        starved_handoffs += is_starved(next);
        stale_handoffs += stale_for(next, 0, VM_STALE_US);
        vm.me->has_token = 0;
        grant(t, next);
    } else if (take_free()) {
        job_unlock();
        return;
    }
    wait_locked(waiting_for);
}

void vm_idle(int waiting_for, uint64_t *t0_ns) {
    if (vm.mode != VM_CTL) return;
    /* Repolling. MPICH takes in one message per progress poll (a halo's Waitall of 4 receives, or an
     * all-to-all inside MPICH's wait loop, failed a test with its other messages already in shared
     * memory), so a rank that handed its token on at the first failed test came back for each of them:
     * 4 ranks on one CPU made 3.5 hand-offs per rank and iteration of a halo exchange and 4 of an
     * all-to-all. So it tests again first: while messages sent to it have not been received (the
     * senders' counts) and it waits to receive, or, where the counters cannot tell (a collective,
     * MPICH's own loops), a few times. A wait for a rank that has not sent yet, or for the receiver of a
     * send, costs no poll more than before. */
    int kind = wait_kind();
    int limit = kind == VM_WAIT_OPAQUE ? repolls_opaque : kind == VM_WAIT_RECV ? repolls_counted : 0;
    if (vm.wait.repolls < limit &&
        (kind == VM_WAIT_OPAQUE || __atomic_load_n(&vm.me->unconsumed, __ATOMIC_RELAXED) > 0)) {
        vm.wait.repolls++;
        repolls++;
        return;
    }
    vm.wait.repolls = 0; /* after a hand-off, the rank that gets the token back may repoll again */
    if (vm.spin_us) {
        int64_t now = now_ns();
        if (*t0_ns == 0) *t0_ns = (uint64_t)now;
        if (now - (int64_t)*t0_ns < (int64_t)vm.spin_us * 1000) return;
    }
    yield_token(waiting_for);
}

void vm_poll_failed(void) {
    if (vm.mode != VM_CTL) return;
    if (++vm.poll_fail < VM_POLLS_BEFORE_YIELD) return;
    vm.poll_fail = 0;
    vm.wait.opaque = 1;
    yield_token(-1);
}

/* MPICH is waiting inside a call of its own (one we do not wrap, or a collective): this rank waits. */
static void mpich_waits(void) {
    idle_progress = 0;
    if (!vm.wait.blocked) {
        vm.wait.blocked = 1;
        vm.me->blocking_calls++;
    }
    vm.wait.opaque = 1;
    vm_idle(vm.wait.waiting_for, &vm.wait.t0);
}

/* MPICH calls sched_yield from its own busy-wait loops (calls we do not wrap: communicator
 * creation, ...). Like the thesis's sginap wrapper, treat that as "this rank is waiting" - but only
 * on the MPI thread and only when MPICH itself is the caller. */
int sched_yield(void) {
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    if (caller >= mpi_text_lo && caller < mpi_text_hi && mpi_thread) {
        vm.calls[VMF_sched_yield]++;
        if (vm.mode == VM_CTL && vm.registered) {
            mpich_waits();
            return 0;
        }
    }
    other_yields++;
    real_yield();
    return 0;
}

/* MPICH's UCX paths wait for one-sided operations (MPI_Win_fence, Win_lock/unlock, Win_start/complete,
 * Win_lock_all) by calling ucp_worker_progress in a loop, never sched_yield. On one node UCX carries
 * those operations as messages that the target's own progress completes, and a folded target has no
 * CPU while the origin spins with its token: every RMA program hung for good when folded (tests/c/rma.c,
 * 4 ranks on one CPU, in its first epoch). So VM_IDLE_PROGRESS calls in a row from libmpi that found
 * nothing to do are a wait, as a sched_yield from libmpi is. Only idle calls count, and any hand-off
 * resets the count, so a progress loop that also yields is not made to wait more often. */
typedef unsigned (*ucp_progress_fn)(void *worker);
unsigned ucp_worker_progress(void *worker) {
    static ucp_progress_fn real;
    if (!real) real = (ucp_progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
    if (!real) abort(); /* only a process that loaded libucp can call it */
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    unsigned events = real(worker);
    /* A wrapper's own wait loop (blocked, and not opaque) hands the token on itself, knowing for what. */
    if (events || !mpi_thread || caller < mpi_text_lo || caller >= mpi_text_hi ||
        (vm.wait.blocked && !vm.wait.opaque)) {
        idle_progress = 0;
        return events;
    }
    if (++idle_progress >= VM_IDLE_PROGRESS && vm.mode == VM_CTL && vm.registered) {
        idle_progresses++;
        mpich_waits();
    }
    return events;
}

static int find_text(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    if ((void *)info->dlpi_addr != libmpi_base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            mpi_text_lo = info->dlpi_addr + ph->p_vaddr;
            mpi_text_hi = mpi_text_lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* message counters for the global-queue heuristics                                               */

static int any_keeps(const int *map);

static int comm_delete(MPI_Comm comm, int kv, void *attr, void *extra) {
    (void)comm, (void)kv, (void)extra;
    if (!any_keeps(attr)) free(attr);
    return MPI_SUCCESS;
}

/* The world slot of rank `r` of a communicator whose rank map is `map` (NULL: MPI_COMM_WORLD), -1 when
 * it has none (not a rank of it, not folded here). */
static int map_slot(const int *map, int r) {
    if (r < 0) return -1;
    if (!map) return slot_of(r);
    if (r >= map[0]) return -1;
    int w = map[1 + r];
    return w == MPI_UNDEFINED ? -1 : slot_of(w);
}

/* A communicator's rank map (size, then each rank's world rank; size 0 for an inter-communicator), kept
 * as its attribute and made on first use; NULL when it cannot be made. Not for MPI_COMM_WORLD. */
static int *rank_map(MPI_Comm comm) {
    int *map = NULL, flag = 0, inter = 0, size = 0;
    if (keyval == MPI_KEYVAL_INVALID) return NULL;
    PMPI_Comm_get_attr(comm, keyval, &map, &flag);
    if (!flag) {
        PMPI_Comm_test_inter(comm, &inter);
        if (!inter && PMPI_Comm_size(comm, &size) == MPI_SUCCESS && size > 0) {
            MPI_Group g, w;
            int *in = malloc(sizeof(int) * (size_t)size);
            map = malloc(sizeof(int) * ((size_t)size + 1));
            if (!in || !map) {
                free(in), free(map);
                return NULL;
            }
            map[0] = size;
            for (int i = 0; i < size; i++) in[i] = i;
            PMPI_Comm_group(comm, &g);
            PMPI_Comm_group(MPI_COMM_WORLD, &w);
            PMPI_Group_translate_ranks(g, size, in, w, map + 1);
            PMPI_Group_free(&g);
            PMPI_Group_free(&w);
            free(in);
        } else {
            map = calloc(1, sizeof(int)); /* inter-communicator: no mapping */
        }
        PMPI_Comm_set_attr(comm, keyval, map);
    }
    return map;
}

int vm_world_rank(MPI_Comm comm, int r) {
    if (r < 0 || vm.mode != VM_CTL) return -1;
    if (comm == MPI_COMM_WORLD) return slot_of(r);
    const int *map = rank_map(comm);
    return map ? map_slot(map, r) : -1;
}

/* Which counted message a receive from `src` on `comm` may take: VM_UNCOUNTED when none can (from
 * MPI_PROC_NULL, over an inter-communicator, from a rank not folded here: vm_world_rank gives its sender
 * -1, so the send was not counted), -1 when any may (MPI_ANY_SOURCE), else the sender's world rank.
 * Taking one off for a receive no counted message matched made a rank with a message on its way look
 * as though nothing were sent to it. */
int vm_recv_peer(MPI_Comm comm, int src) {
    if (vm.mode != VM_CTL || src == MPI_PROC_NULL) return VM_UNCOUNTED;
    if (src == MPI_ANY_SOURCE) {
        int inter = 0;
        PMPI_Comm_test_inter(comm, &inter);
        return inter ? VM_UNCOUNTED : -1;
    }
    int w = vm_world_rank(comm, src);
    return w < 0 ? VM_UNCOUNTED : w;
}

int vm_counted_peer(int peer) { return peer >= 0 || (peer == -1 && !per_node); /* from another node: blind */ }

/* Called before the send starts (sequentially consistent: the count is seen before the message can be). */
void vm_count_send(int dest) {
    vm_rank *e = rank_entry(dest);
    if (!e) return;
    __atomic_fetch_add(&e->unconsumed, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&vm.me->sent_not_consumed, 1, __ATOMIC_SEQ_CST);
    /* Global queue: a token freed because only starved ranks waited goes to the rank we now feed. */
    if (vm.mode == VM_CTL && vm.job->queue != VM_QUEUE_LOCAL && dest != vm.rank &&
        __atomic_load_n(&vm.rt->rt.rt_tokens_free, __ATOMIC_SEQ_CST) > 0 && is_waiting(dest)) {
        job_lock();
        sync_tokens();
        int p = vm.job->queue != VM_QUEUE_LOCAL && is_waiting(dest) ? ntokens() : 0, t = -1;
        for (int k = 0; k < p; k++) /* a free token, the one on the receiver's CPU first */
            if (vm.rt->rt.holder[k] < 0 && (t < 0 || e->pinned_to == (uint32_t)vm.job->cpus[k] + 1)) t = k;
        if (t >= 0) {
            grant(t, dest);
            count_free();
            fed_grants++;
        }
        job_unlock();
    }
}

/* The send counted did not start. */
void vm_uncount_send(int dest) {
    vm_rank *e = rank_entry(dest);
    if (!e) return;
    if (__atomic_load_n(&e->unconsumed, __ATOMIC_RELAXED) > 0) __atomic_fetch_sub(&e->unconsumed, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&vm.me->sent_not_consumed, __ATOMIC_RELAXED) > 0)
        __atomic_fetch_sub(&vm.me->sent_not_consumed, 1, __ATOMIC_RELAXED);
}

void vm_count_recv(int src) {
    if (vm.mode != VM_CTL) return;
    if (__atomic_load_n(&vm.me->unconsumed, __ATOMIC_RELAXED) > 0)
        __atomic_fetch_sub(&vm.me->unconsumed, 1, __ATOMIC_RELAXED);
    vm_rank *e = rank_entry(src);
    if (e && __atomic_load_n(&e->sent_not_consumed, __ATOMIC_RELAXED) > 0)
        __atomic_fetch_sub(&e->sent_not_consumed, 1, __ATOMIC_RELAXED);
}

/* Open-addressing maps MPI_Request -> a positive int (0 = empty slot): the pending receives (value: source
 * world rank + 2) and the persistent point-to-point requests (value: see vm_persist_add). Written here:
 * a handful of loads per lookup on the hot path of every Wait/Test, with no allocation. */
#define VM_TRACK 1024
struct reqmap {
    MPI_Request req[VM_TRACK];
    int val[VM_TRACK];
    int n;
};
static struct reqmap tracked, persistent;

static unsigned req_hash(MPI_Request r) { return ((unsigned)r * 2654435761u) % VM_TRACK; }

static void map_insert(struct reqmap *m, MPI_Request req, int val) {
    if (m->n >= VM_TRACK / 2) return; /* full enough: left uncounted, as an unwrapped call would be */
    for (unsigned i = req_hash(req), k = 0; k < VM_TRACK; k++, i = (i + 1) % VM_TRACK)
        if (m->val[i] == 0) {
            m->req[i] = req, m->val[i] = val;
            m->n++;
            return;
        }
}

static int map_find(const struct reqmap *m, MPI_Request req) {
    if (!m->n) return -1;
    for (unsigned i = req_hash(req), k = 0; k < VM_TRACK; k++, i = (i + 1) % VM_TRACK) {
        if (m->val[i] == 0) return -1;
        if (m->req[i] == req) return (int)i;
    }
    return -1;
}

/* Remove a request; returns its value, 0 when it was not there. */
static int map_remove(struct reqmap *m, MPI_Request req) {
    int i = map_find(m, req);
    if (i < 0) return 0;
    int val = m->val[i];
    m->val[i] = 0;
    m->n--;
    /* Re-insert the rest of the cluster so that lookups never stop at the hole. */
    for (unsigned j = ((unsigned)i + 1) % VM_TRACK; m->val[j] != 0; j = (j + 1) % VM_TRACK) {
        int v = m->val[j];
        m->val[j] = 0;
        m->n--;
        map_insert(m, m->req[j], v);
    }
    return val;
}

void vm_track_recv(MPI_Request req, int src) {
    if (vm.mode == VM_CTL && req != MPI_REQUEST_NULL && src != VM_UNCOUNTED) {
        map_insert(&tracked, req, src + 2);
        vm.ntracked = tracked.n;
    }
}

/* Receives from MPI_ANY_SOURCE, pending (`anyrecv`) and persistent (`anypersist`), each with the rank
 * map of its communicator, so that its completion takes the message off the count of the sender its
 * status names. Taken off blindly, a message from a rank not folded here (another node's, never
 * counted) was taken for a counted one, which hid the next counted message on its way to this rank,
 * and the real sender's count of messages sent stayed one too high for good. The map, not the
 * communicator: the program may free that while the receive is pending, and it then goes away inside
 * the call that completes the receive; a map still listed here outlives it (comm_delete). A short
 * list: such receives are few at a time (a master's one, or one per worker); when it is full, a receive
 * is counted blindly, as before. */
#define VM_ANY 64
struct anylist {
    MPI_Request req[VM_ANY];
    const int *map[VM_ANY]; /* NULL: MPI_COMM_WORLD */
    int n;
};
static struct anylist anyrecv, anypersist;
static int *orphaned[2 * VM_ANY]; /* maps of freed communicators that a listed receive still names */
static int norphaned;

static int any_keeps(const int *map) {
    int used = 0;
    for (int i = 0; i < anyrecv.n && !used; i++) used = anyrecv.map[i] == map;
    for (int i = 0; i < anypersist.n && !used; i++) used = anypersist.map[i] == map;
    if (!used) return 0;
    orphaned[norphaned++] = (int *)map; /* room: each orphan is named by one of the 2 * VM_ANY entries */
    return 1;
}

/* A listed map is named once less: free it if its communicator is gone and no receive names it now. */
static void any_release(const int *map) {
    for (int k = 0; k < norphaned; k++) {
        if (orphaned[k] != map) continue;
        for (int i = 0; i < anyrecv.n; i++)
            if (anyrecv.map[i] == map) return;
        for (int i = 0; i < anypersist.n; i++)
            if (anypersist.map[i] == map) return;
        free(orphaned[k]);
        orphaned[k] = orphaned[--norphaned];
        return;
    }
}

static int any_add(struct anylist *l, MPI_Request req, const int *map) {
    if (l->n >= VM_ANY) return 0;
    l->req[l->n] = req, l->map[l->n] = map;
    l->n++;
    vm.nany = anyrecv.n;
    return 1;
}

static int any_find(const struct anylist *l, MPI_Request req) {
    for (int i = 0; i < l->n; i++)
        if (l->req[i] == req) return i;
    return -1;
}

/* Take a request off the list; its map goes to `*map` (released by the caller). */
static int any_take(struct anylist *l, MPI_Request req, const int **map) {
    int i = any_find(l, req);
    if (i < 0) return 0;
    *map = l->map[i];
    l->n--;
    l->req[i] = l->req[l->n], l->map[i] = l->map[l->n];
    vm.nany = anyrecv.n;
    return 1;
}

/* The rank map an any-source receive on `comm` keeps (NULL: MPI_COMM_WORLD's); `*ok` 0 when there is
 * none to keep. */
static const int *comm_map(MPI_Comm comm, int *ok) {
    *ok = 1;
    if (comm == MPI_COMM_WORLD) return NULL;
    const int *map = rank_map(comm);
    *ok = map && map[0] > 0;
    return map;
}

void vm_track_recv_on(MPI_Request req, MPI_Comm comm, int src) {
    int peer = vm_recv_peer(comm, src), ok = 0;
    vm_track_recv(req, peer);
    if (peer == -1 && vm_track_peek(req) == -1) { /* tracked (the map may be full) */
        const int *map = comm_map(comm, &ok);
        if (ok) any_add(&anyrecv, req, map);
    }
}

int vm_track_peek(MPI_Request req) {
    int i = map_find(&tracked, req);
    return i < 0 ? -2 : tracked.val[i] - 2;
}

/* Forget a request; returns its source (-1 unknown) or -2 when it was not tracked. */
int vm_untrack(MPI_Request req) {
    int v = map_remove(&tracked, req);
    vm.ntracked = tracked.n;
    const int *map;
    if (v - 2 == -1 && anyrecv.n && any_take(&anyrecv, req, &map)) any_release(map);
    return v - 2;
}

void vm_request_done(MPI_Request req, const MPI_Status *st) {
    if (vm.ncoll) vm_coll_done(req);
    if (!vm.ntracked) return;
    const int *map = NULL;
    int any = anyrecv.n && any_take(&anyrecv, req, &map);
    int src = vm_untrack(req);
    if (any) {
        int cancelled = 0;
        if (src == -1 && st) {
            PMPI_Test_cancelled(st, &cancelled);
            src = cancelled ? -1 : map_slot(map, st->MPI_SOURCE); /* -1: no counted message taken */
        }
        any_release(map);
        if (src == -1 && st) return;
    }
    if (src > -2) vm_count_recv(src);
}

void vm_requests_done(const MPI_Request *before, const MPI_Request *after, int n) {
    for (int i = 0; i < n && vm_requests_watched(); i++)
        if (before[i] != MPI_REQUEST_NULL && after[i] == MPI_REQUEST_NULL) vm_request_done(before[i], NULL);
}

/* Pending nonblocking collectives (MPI_Iallreduce ...), each with its communicator: a wait that
 * includes one is a collective's (opaque to the counters, on that communicator), as the blocking call's
 * is. Unrecorded, an MPI_Wait for an MPI_Iallreduce read as a wait for sends only (never ready, never
 * repolled), and an overlap loop (compute, start the reduction, compute, wait) folded 4 ranks on one CPU
 * ran 1.5-1.9x as long as the same ranks split by taskset. A short list, as the any-source one: a
 * program keeps few collectives in flight; when it is full a wait for one is judged as before. */
static struct {
    MPI_Request req[VM_ANY];
    MPI_Comm comm[VM_ANY];
} colls;

void vm_coll_started(MPI_Request req, MPI_Comm comm) {
    if (req == MPI_REQUEST_NULL || vm.ncoll >= VM_ANY) return;
    colls.req[vm.ncoll] = req, colls.comm[vm.ncoll] = comm;
    vm.ncoll++;
}

MPI_Comm vm_coll_pending(const MPI_Request *reqs, int n) {
    for (int i = 0; i < n && vm.ncoll; i++)
        for (int k = 0; reqs[i] != MPI_REQUEST_NULL && k < vm.ncoll; k++)
            if (colls.req[k] == reqs[i]) {
                coll_waits++;
                return colls.comm[k];
            }
    return MPI_COMM_NULL;
}

void vm_coll_done(MPI_Request req) {
    for (int k = 0; k < vm.ncoll; k++)
        if (colls.req[k] == req) {
            vm.ncoll--;
            colls.req[k] = colls.req[vm.ncoll], colls.comm[k] = colls.comm[vm.ncoll];
            return;
        }
}

/* Persistent requests: value (peer world rank + 2) * 2 + is_send, so never 0. */
void vm_persist_add(MPI_Request req, MPI_Comm comm, int world_peer, int send) {
    /* A receive no counted message can match is left out: its start tracks nothing. */
    if (req == MPI_REQUEST_NULL || world_peer == VM_UNCOUNTED) return;
    map_insert(&persistent, req, (world_peer + 2) * 2 + !!send);
    int ok = 0;
    if (!send && world_peer == -1) {
        const int *map = comm_map(comm, &ok);
        if (ok) any_add(&anypersist, req, map);
    }
}

void vm_persist_free(MPI_Request req) {
    const int *map;
    if (persistent.n) map_remove(&persistent, req);
    if (anypersist.n && any_take(&anypersist, req, &map)) any_release(map);
}

/* Before a start: count each persistent send among them (as vm_count_send does for a nonblocking send). */
void vm_persist_starting(const MPI_Request *reqs, int n, int undo) {
    for (int i = 0; i < n && persistent.n; i++) {
        int k = map_find(&persistent, reqs[i]);
        if (k < 0 || !(persistent.val[k] & 1)) continue;
        int dest = persistent.val[k] / 2 - 2;
        if (undo)
            vm_uncount_send(dest);
        else
            vm_count_send(dest);
    }
}

/* After a successful start: track each persistent receive among them until it completes. */
void vm_persist_started(const MPI_Request *reqs, int n) {
    for (int i = 0; i < n && persistent.n; i++) {
        int k = map_find(&persistent, reqs[i]);
        if (k < 0 || (persistent.val[k] & 1)) continue;
        int src = persistent.val[k] / 2 - 2, a = src == -1 ? any_find(&anypersist, reqs[i]) : -1;
        vm_track_recv(reqs[i], src);
        if (a >= 0 && vm_track_peek(reqs[i]) == -1) any_add(&anyrecv, reqs[i], anypersist.map[a]);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* registration                                                                                   */

static void write_stats(const char *why) {
    if (!stats_path) return;
    const char *mode = top_mode == VM_CTL ? "ctl" : (top_mode == VM_FAST ? "fast" : "plain");
    char buf[4096];
    int n = snprintf(buf, sizeof buf,
                     "{\"rank\":%d,\"pid\":%d,\"job\":%d,\"mode\":\"%s\",\"end\":\"%s\",\"mpi_calls\":%llu,"
                     "\"blocking_calls\":%llu,\"ctx_switches\":%llu,\"yields\":%lu,\"sleeps\":%lu,\"claims\":%lu,"
                     "\"lock_yields\":%lu,\"other_yields\":%lu,\"repolls\":%lu,\"starved_handoffs\":%lu,\"stale_handoffs\":%lu,\"fed_grants\":%lu,\"borrows\":%lu,"
                     "\"coll_waits\":%lu,\"colls_pending\":%d,"
                     "\"generations\":%u,\"idle_progress_waits\":%lu,\"off\":\"%s\","
                     "\"reclaimed\":%u,\"unconsumed\":%lld,\"sent_not_consumed\":%lld,\"call_waits\":%lu,\"call_wait_mean_us\":%.1f,"
                     "\"call_waits_over_30us\":%lu,\"call_waits_over_100us\":%lu,\"token_waits\":%lu,\"token_wait_mean_us\":%.1f,"
                     "\"calls\":{",
                     vm.rank, (int)vm.pid, (int)vm.job_id, mode, why, (unsigned long long)vm.me->mpi_calls,
                     (unsigned long long)vm.me->blocking_calls, (unsigned long long)vm.me->ctx_switches, yields, sleeps,
                     claims, lock_yields, other_yields, repolls, starved_handoffs, stale_handoffs, fed_grants, borrows, coll_waits, vm.ncoll, generations, idle_progresses,
                     off_why, reclaimed, (long long)__atomic_load_n(&vm.me->unconsumed, __ATOMIC_RELAXED),
                     (long long)__atomic_load_n(&vm.me->sent_not_consumed, __ATOMIC_RELAXED),
                     call_waits, call_waits ? call_wait_sum_ns / call_waits / 1000.0 : 0.0, call_waits_over[0],
                     call_waits_over[1], token_waits, token_waits ? token_wait_sum_ns / token_waits / 1000.0 : 0.0);
    static const char *names[] = {
#define VM_FUNC_NAME(name) #name,
        VM_FUNCS(VM_FUNC_NAME)
#undef VM_FUNC_NAME
    };
    int first = 1;
    for (int i = 0; i < VMF_COUNT && n < (int)sizeof buf - 64; i++)
        if (vm.calls[i]) {
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s\"%s\":%llu", first ? "" : ",", names[i],
                          (unsigned long long)vm.calls[i]);
            first = 0;
        }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    n += snprintf(buf + n, sizeof buf - (size_t)n,
                  "},\"utime_s\":%.6f,\"stime_s\":%.6f,\"nvcsw\":%ld,\"nivcsw\":%ld}\n",
                  ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
                  ru.ru_nvcsw, ru.ru_nivcsw);
    int fd = open(stats_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, (size_t)n); /* one write: lines of ranks never interleave */
        (void)w;
        close(fd);
    }
}

/* Leave the table: pass the token on, mark the slot done (the CPU manager frees it). */
void vm_unregister(const char *why) {
    static int done;
    if (done || getpid() != vm.pid) return;
    done = 1;
    if (vm.registered && vm.job && job_valid()) {
        job_lock();
        release_token();
        vm.me->state = VM_RANK_DONE;
        job_unlock();
    }
    write_stats(why);
    if (vm.registered) {
        __atomic_store_n(&vm.me->state, VM_RANK_DONE, __ATOMIC_RELEASE);
        detach_slot();
    }
    vm.mode = VM_OFF;
    vm.job = NULL;
}

static void at_exit(void) { vm_unregister("exit"); }

static void on_fatal(int sig) {
    /* Async: take the job lock only if this process was not inside it; otherwise the others
     * reclaim our token when they see the slot done. */
    if (vm.registered && getpid() == vm.pid) {
        if (!in_cs && vm.job && job_valid()) {
            job_lock();
            release_token();
            vm.me->state = VM_RANK_DONE;
            job_unlock();
        }
        __atomic_store_n(&vm.me->state, VM_RANK_DONE, __ATOMIC_RELEASE);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void after_fork_child(void) {
    /* A forked child is not the rank: it must never touch the rank's slot or tokens. */
    vm.me = &dummy_rank;
    vm.registered = 0;
    vm.mode = VM_OFF;
    vm.job = NULL;
    vm.pid = getpid();
}

/* The node table, read-only (only the CPU manager writes it). */
static const vm_segment *attach(const char *name) {
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(vm_segment))
        p = mmap(NULL, sizeof(vm_segment), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    const vm_segment *s = p;
    if (s->header.magic != VM_MAGIC || s->header.version != VM_VERSION) {
        munmap(p, sizeof(vm_segment));
        return NULL;
    }
    return s;
}

/* Our job's segment (token state and rank slots), read-write; NULL if it is not what the job entry says. */
static vm_jobseg *attach_job(const vm_job *j) {
    char name[VM_NAME_LEN];
    memcpy(name, j->rt_name, sizeof name);
    name[sizeof name - 1] = 0;
    if (!name[0]) return NULL;
    size_t size = sizeof(vm_jobrt) + (size_t)vm.nranks * sizeof(vm_rank);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= size)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    vm_jobseg *rt = p;
    if (rt->rt.magic != VM_JOB_MAGIC || rt->rt.job_id != vm.job_id || rt->rt.nranks != vm.nranks) {
        munmap(p, size);
        return NULL;
    }
    return rt;
}

/* MPICH maps its node segment during MPI_Init and removes it only in MPI_Finalize. The rank reports its
 * name in its slot so that the CPU manager can remove it when the job is killed: the manager cannot read
 * another user's /proc/PID/maps without CAP_SYS_PTRACE, which its unit does not grant. */
static void note_mpich_segment(char *out, size_t len) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return;
    const size_t plen = strlen(VM_MPICH_SHM_PREFIX);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, VM_MPICH_SHM_PREFIX);
        if (!p) continue;
        p += plen;
        size_t n = 0;
        while (n + 1 < len && (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '-')) n++;
        if (n) {
            memcpy(out, p, n);
            out[n] = 0;
            break;
        }
    }
    fclose(f);
}

void vm_init(void) {
    static int once;
    if (once) return;
    once = 1;
    vm.pid = getpid();
    vm.me = &dummy_rank;
    debug = getenv("VMRT_DEBUG") && *getenv("VMRT_DEBUG") && strcmp(getenv("VMRT_DEBUG"), "0");
    stats_path = getenv("VMRT_STATS");
    if (stats_path && !*stats_path) stats_path = NULL;
    read_tuning();
    PMPI_Comm_rank(MPI_COMM_WORLD, &vm.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &vm.nranks);
    world_rank = vm.rank, world_size = vm.nranks;
    mpi_thread = 1;
    Dl_info info;
    if (dladdr((void *)PMPI_Init, &info)) {
        libmpi_base = info.dli_fbase;
        dl_iterate_phdr(find_text, NULL);
    }
    atexit(at_exit);
    pthread_atfork(NULL, NULL, after_fork_child);

    const char *shm = getenv("VMSCHED_SHM"), *job = getenv("VMSCHED_JOB");
    if (!shm || !job || !*shm || !*job) return; /* not under vmsched: plain MPI */
    vm.job_id = (int32_t)strtol(job, NULL, 10);
    vm.seg = attach(shm);
    if (!vm.seg) {
        DBG("no table %s: plain MPI", shm);
        return;
    }
    if (vm.seg->header.shutdown || pid_dead(vm.seg->header.manager_pid)) {
        DBG("CPU manager gone: plain MPI");
        return;
    }
    const vm_job *j = NULL;
    int job_slot = -1;
    for (int i = 0; i < VM_MAX_JOBS; i++)
        if (vm.seg->jobs[i].state != VM_JOB_FREE && vm.seg->jobs[i].job_id == vm.job_id) {
            j = &vm.seg->jobs[i], job_slot = i;
            break;
        }
    MPI_Comm parent = MPI_COMM_NULL;
    PMPI_Comm_get_parent(&parent);
    if (j && parent != MPI_COMM_NULL) {
        /* Started by MPI_Comm_spawn: its MPI_COMM_WORLD is not the job's, and the job's slots are the
         * ranks mpiexec started (spawned as many as the job has, worker r took slot r over, and the
         * manager lost the rank that held it: tests/c/spawn.c). It runs unfolded, on the job's CPUs as
         * they are now, not on the rest of the node; the manager does not follow it when they change. */
        int n = j->ncpus < 0 ? 0 : j->ncpus > VM_MAX_CPUS ? VM_MAX_CPUS : j->ncpus;
        pin_to(j->cpus, n);
        if (vm.rank == 0)
            fprintf(stderr, "vmrt: job %d: processes started by MPI_Comm_spawn run unfolded, as plain MPI on the "
                            "job's CPUs\n", (int)vm.job_id);
        return;
    }
    const char *pn = getenv("VMSCHED_PER_NODE");
    per_node = pn && !strcmp(pn, "1");
    if (!j || (per_node ? j->nranks > vm.nranks : j->nranks != vm.nranks)) {
        fprintf(stderr, "vmrt: job %d %s; running as plain MPI\n", (int)vm.job_id,
                j ? "has a different number of ranks than MPI_COMM_WORLD" : "is not admitted");
        return;
    }
    if (per_node) vm.nranks = j->nranks; /* this node's ranks only */
    for (int i = 0; i < (int)(sizeof cpu_index / sizeof cpu_index[0]); i++) cpu_index[i] = -1;
    for (uint32_t i = 0; i < vm.seg->header.ncpus && i < VM_MAX_CPUS; i++) {
        int c = vm.seg->cpus[i].cpu;
        if (c >= 0 && c < (int)(sizeof cpu_index / sizeof cpu_index[0])) cpu_index[c] = (int)i;
    }
    vm.rt = attach_job(j);
    if (!vm.rt) {
        fprintf(stderr, "vmrt: cannot open the segment of job %d; rank %d runs as plain MPI\n", (int)vm.job_id,
                vm.rank);
        return;
    }

    if (per_node) {
        int slot = claim_slot();
        if (slot < 0) {
            fprintf(stderr, "vmrt: job %d admitted %d ranks on this node, all registered; rank %d runs as plain MPI\n",
                    (int)vm.job_id, vm.nranks, world_rank);
            vm.rank = world_rank, vm.nranks = world_size;
            return;
        }
        vm.rank = slot;
        slot_cache = malloc(sizeof(int) * (size_t)world_size);
        for (int w = 0; slot_cache && w < world_size; w++) slot_cache[w] = -1;
    }
    leave_session();
    sched_getaffinity(0, sizeof initial_mask, &initial_mask); /* before the manager can pin us */
    /* Our slot is ours alone (slot = rank, or claimed per node): no lock. The state goes last: the
     * manager reads a slot as registered only once its state says so. The pid is written whole at
     * once (never 0 in between: per node a zero pid marks a free slot). */
    vm_rank *me = &vm.rt->ranks[vm.rank], init;
    memset(&init, 0, sizeof init);
    init.pid = vm.pid;
    note_mpich_segment(init.mpich_shm, sizeof init.mpich_shm);
    *me = init;
    me->job_id = vm.job_id, me->rank = vm.rank, me->world_rank = world_rank;
    me->job_slot = job_slot, me->cpu = sched_getcpu(), me->waiting_for = -1, me->wake = VM_WAKE_WAIT;
    __atomic_store_n(&me->state, VM_RANK_RUNNING, __ATOMIC_RELEASE);
    me->mpi_calls = dummy_rank.mpi_calls;
    vm.me = me;
    vm.job = j;
    vm.registered = 1;
    vm.seen_gen = j->generation - 1; /* force the first generation change below */
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &keyval, NULL);
    static const int fatal[] = {SIGTERM, SIGHUP, SIGQUIT};
    for (unsigned i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        struct sigaction old;
        if (sigaction(fatal[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(fatal[i], on_fatal);
    }
    last_check_ns = now_ns();
    vm.mode = VM_FAST;
    vm_generation_changed();
    DBG("registered job %d rank %d/%d pid %d", (int)vm.job_id, vm.rank, vm.nranks, (int)vm.pid);
    if (vm.mode == VM_CTL) vm_wait_token(-1);
}
