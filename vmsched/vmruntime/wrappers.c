/* vmruntime PMPI wrappers.
 *
 * Every wrapper counts the call and checks the job's generation (vm_enter, a few loads). When the
 * job is not folded (mode FAST or OFF) the original PMPI function runs as is. When it is folded
 * (CTL), a blocking point-to-point operation becomes "start the nonblocking form, test in a loop",
 * and each failed test lets the core spin or hand the token on and sleep (vm_idle); the loop knows
 * whom it waits for (the sender heuristic's hint). Test/Iprobe calls that keep failing count as
 * waiting too: a rank that polls would otherwise keep its CPU from the rank it waits for.
 * Collectives stay blocking calls (see below) and block through the sched_yield hook; a wait for a
 * nonblocking collective's request is a collective's wait (wait_for_colls).
 *
 * mpi4py 4 calls the MPI-4 large-count (_c) variants and matched probes, so those are wrapped too.
 */
#include <stdlib.h>
#include <string.h>

#include "vmrt.h"

#define CTL (vm.mode == VM_CTL)

/* Source of the first pending tracked receive (the sender heuristic's hint), -1 if none. */
static int pending_source(const MPI_Request *reqs, int n) {
    if (!vm.ntracked) return -1;
    for (int i = 0; i < n; i++) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        int s = vm_track_peek(reqs[i]);
        if (s >= 0) return s;
    }
    return -1;
}

/* Whether a pending request among them is a tracked receive. */
static int pending_recv(const MPI_Request *reqs, int n) {
    for (int i = 0; i < n && vm.ntracked; i++)
        if (reqs[i] != MPI_REQUEST_NULL && vm_counted_peer(vm_track_peek(reqs[i]))) return 1;
    return 0;
}

/* A send is counted (vm_count_send) before it starts, and `sent` takes the count back if the call that
 * was to start it failed: counted after, a receiver on another CPU could take the message in first and
 * find nothing to take off its count, which then stayed one too high for good (a ring of 4 on 2 CPUs,
 * global queue: two ranks' counts drifted up, and they repolled 25 times per lap in vain). */
static inline int sent(int world_dest, int rc) {
    if (rc != MPI_SUCCESS) vm_uncount_send(world_dest);
    return rc;
}

/* A wait that includes a pending nonblocking collective is that collective's wait (vm_coll_started). */
static void wait_for_colls(const MPI_Request *reqs, int n) {
    MPI_Comm comm = vm.ncoll ? vm_coll_pending(reqs, n) : MPI_COMM_NULL;
    if (comm != MPI_COMM_NULL) vm.wait.opaque = 1, vm.wait.comm = comm;
}

/* Complete one request by testing it, yielding the CPU between tests; `recv`: it is a receive. */
static int wait1(MPI_Request *rq, MPI_Status *st, int waiting_for, int recv) {
    int flag = 0, rc = PMPI_Test(rq, &flag, st);
    if (rc != MPI_SUCCESS || flag) return rc;
    vm.me->blocking_calls++;
    vm.wait.blocked = 1;
    vm.wait.recv = recv;
    for (;;) {
        vm_idle(waiting_for, &vm.wait.t0);
        if (!CTL) return PMPI_Wait(rq, st);
        rc = PMPI_Test(rq, &flag, st);
        if (rc != MPI_SUCCESS || flag) return rc;
    }
}

/* Snapshot of a request array, so that completed receives can be recognised afterwards. */
struct snap {
    MPI_Request small[16];
    MPI_Request *r;
};

static void snap_take(struct snap *s, const MPI_Request *reqs, int n) {
    s->r = NULL;
    if (!vm_requests_watched() || n <= 0) return;
    s->r = n <= 16 ? s->small : malloc(sizeof(MPI_Request) * (size_t)n);
    if (s->r) memcpy(s->r, reqs, sizeof(MPI_Request) * (size_t)n);
}

/* Count the tracked receives that completed: those the call reported (all of them, or the `nidx` in
 * `idx`; a persistent request stays a valid handle), then any other that became MPI_REQUEST_NULL (an
 * MPI_ERR_IN_STATUS return reports none). The k-th reported completion's status is sts[k] (NULL: none). */
static void snap_done(struct snap *s, const MPI_Request *reqs, int n, int all, const int *idx, int nidx,
                      const MPI_Status *sts) {
    if (!s->r) return;
    for (int i = 0; all && i < n && vm_requests_watched(); i++) vm_request_done(s->r[i], sts ? &sts[i] : NULL);
    for (int k = 0; !all && k < nidx && vm_requests_watched(); k++)
        if (idx[k] >= 0 && idx[k] < n) vm_request_done(s->r[idx[k]], sts ? &sts[k] : NULL);
    vm_requests_done(s->r, reqs, n);
    if (s->r != s->small) free(s->r);
}

/* The statuses a completion call fills: the caller's, or ours when it ignores them while a receive from
 * MPI_ANY_SOURCE is pending (its sender is read from MPI_SOURCE). `reported` is what snap_done reads. */
struct stats {
    MPI_Status small[16];
    MPI_Status *own;
    MPI_Status *reported;
};

static MPI_Status *stats_take(struct stats *t, MPI_Status *sts, int n) {
    t->own = NULL;
    t->reported = sts;
    if (sts != MPI_STATUSES_IGNORE && sts != MPI_STATUS_IGNORE) return sts;
    t->reported = NULL;
    if (!vm.nany || n <= 0) return sts;
    t->own = n <= 16 ? t->small : malloc(sizeof(MPI_Status) * (size_t)n);
    if (!t->own) return sts;
    t->reported = t->own;
    return t->own;
}

static void stats_done(struct stats *t) {
    if (t->own && t->own != t->small) free(t->own);
}

/* ---------------------------------------------------------------------------------------------- */
/* init / finalize                                                                                */

/* MPICH's shared-memory ("release_gather") Barrier, Bcast, Reduce and Allreduce, which it takes on one
 * node once a communicator has made a few of these calls, wait by spinning on flags in shared memory
 * and never call sched_yield. A folded rank waiting there never handed its token on, and the
 * queue-mates that had to set those flags never ran: a loop of 8-byte MPI_Allreduce or of MPI_Barrier,
 * 4 ranks on one CPU, hung for good at its 2nd or 3rd call (tests/c/colls.c). Its MPIR algorithms
 * wait in the progress engine, which yields. Set before MPI_Init reads them, over any value the job
 * set: the runtime cannot fold a rank that waits without telling it. They add a reduction's values in
 * another order, so a floating-point sum can round differently from plain MPICH's (the same in every
 * run under the runtime, folded or not: tests/c/fpsum.c, vmruntime README). */
static void mpich_settings(void) {
    static const char *const algorithms[] = {
        "MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM", "MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM",
        "MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM", "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM"};
    for (size_t i = 0; i < sizeof algorithms / sizeof algorithms[0]; i++) setenv(algorithms[i], "mpir", 1);
}

int MPI_Init(int *argc, char ***argv) {
    vm_enter(VMF_Init);
    mpich_settings();
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) vm_init();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    vm_enter(VMF_Init_thread);
    mpich_settings();
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) vm_init();
    return rc;
}

int MPI_Finalize(void) {
    vm_enter(VMF_Finalize);
    /* Leave before PMPI_Finalize: it may block in the kernel (PMI), and a token held there would
     * stop the ranks that still have to reach it. */
    vm_unregister("finalize");
    return PMPI_Finalize();
}

int MPI_Abort(MPI_Comm comm, int errorcode) {
    vm_enter(VMF_Abort);
    vm_unregister("abort");
    return PMPI_Abort(comm, errorcode);
}

/* ---------------------------------------------------------------------------------------------- */
/* point to point                                                                                 */

#define BLOCKING_SEND(NAME, INAME, CT)                                                                   \
    int MPI_##NAME(const void *buf, CT count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {     \
        vm_enter(VMF_##NAME);                                                                          \
        if (!CTL) return PMPI_##NAME(buf, count, dt, dest, tag, comm);                                 \
        int w = vm_world_rank(comm, dest);                                                             \
        MPI_Request rq;                                                                                \
        vm_count_send(w);                                                                              \
        int rc = sent(w, PMPI_##INAME(buf, count, dt, dest, tag, comm, &rq));                          \
        if (rc != MPI_SUCCESS) return rc;                                                              \
        return wait1(&rq, MPI_STATUS_IGNORE, w, 0);                                                    \
    }

BLOCKING_SEND(Send, Isend, int)
BLOCKING_SEND(Send_c, Isend_c, MPI_Count)
BLOCKING_SEND(Ssend, Issend, int)
BLOCKING_SEND(Ssend_c, Issend_c, MPI_Count)
BLOCKING_SEND(Rsend, Irsend, int)
BLOCKING_SEND(Rsend_c, Irsend_c, MPI_Count)

/* Buffered sends complete locally: count them only. */
#define COUNTED_SEND(NAME, CT)                                                                           \
    int MPI_##NAME(const void *buf, CT count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {     \
        vm_enter(VMF_##NAME);                                                                          \
        int w = vm_world_rank(comm, dest); /* -1 unless folded */                                      \
        vm_count_send(w);                                                                              \
        return sent(w, PMPI_##NAME(buf, count, dt, dest, tag, comm));                                  \
    }

COUNTED_SEND(Bsend, int)
COUNTED_SEND(Bsend_c, MPI_Count)

#define NONBLOCKING_SEND(NAME, CT)                                                                       \
    int MPI_##NAME(const void *buf, CT count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,       \
                   MPI_Request *rq) {                                                                  \
        vm_enter(VMF_##NAME);                                                                          \
        int w = vm_world_rank(comm, dest); /* -1 unless folded */                                      \
        vm_count_send(w);                                                                              \
        return sent(w, PMPI_##NAME(buf, count, dt, dest, tag, comm, rq));                              \
    }

NONBLOCKING_SEND(Isend, int)
NONBLOCKING_SEND(Isend_c, MPI_Count)
NONBLOCKING_SEND(Issend, int)
NONBLOCKING_SEND(Issend_c, MPI_Count)
NONBLOCKING_SEND(Irsend, int)
NONBLOCKING_SEND(Irsend_c, MPI_Count)
NONBLOCKING_SEND(Ibsend, int)
NONBLOCKING_SEND(Ibsend_c, MPI_Count)

/* A receive completed from `src` (its status's MPI_SOURCE): take it off the counts if its send was counted. */
static void counted_recv(MPI_Comm comm, int src) {
    int from = vm_recv_peer(comm, src);
    if (from != VM_UNCOUNTED) vm_count_recv(from);
}

#define BLOCKING_RECV(NAME, INAME, CT)                                                                   \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,              \
                   MPI_Status *st) {                                                                   \
        vm_enter(VMF_##NAME);                                                                          \
        if (!CTL) return PMPI_##NAME(buf, count, dt, src, tag, comm, st);                              \
        MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;                                      \
        MPI_Request rq;                                                                                \
        int rc = PMPI_##INAME(buf, count, dt, src, tag, comm, &rq);                                    \
        if (rc != MPI_SUCCESS) return rc;                                                              \
        rc = wait1(&rq, s, vm_world_rank(comm, src), vm_counted_peer(vm_recv_peer(comm, src)));          \
        if (rc == MPI_SUCCESS) counted_recv(comm, s->MPI_SOURCE);                                      \
        return rc;                                                                                     \
    }

BLOCKING_RECV(Recv, Irecv, int)
BLOCKING_RECV(Recv_c, Irecv_c, MPI_Count)

#define NONBLOCKING_RECV(NAME, CT)                                                                       \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,              \
                   MPI_Request *rq) {                                                                  \
        vm_enter(VMF_##NAME);                                                                          \
        int rc = PMPI_##NAME(buf, count, dt, src, tag, comm, rq);                                      \
        if (CTL && rc == MPI_SUCCESS) vm_track_recv_on(*rq, comm, src);                                \
        return rc;                                                                                     \
    }

NONBLOCKING_RECV(Irecv, int)
NONBLOCKING_RECV(Irecv_c, MPI_Count)

/* Complete a receive and a send (a Sendrecv) by testing both, yielding the CPU between tests; the
 * receive's status goes to `st`. */
static int wait_pair(MPI_Request rq[2], MPI_Status *st, int waiting_for, int recv) {
    MPI_Status sts[2];
    int flag = 0, rc = PMPI_Testall(2, rq, &flag, sts);
    if (rc == MPI_SUCCESS && !flag) {
        vm.me->blocking_calls++;
        vm.wait.blocked = 1;
        vm.wait.recv = recv;
        for (;;) {
            vm_idle(waiting_for, &vm.wait.t0);
            if (!CTL) {
                rc = PMPI_Waitall(2, rq, sts);
                break;
            }
            rc = PMPI_Testall(2, rq, &flag, sts);
            if (rc != MPI_SUCCESS || flag) break;
        }
    }
    if (rc == MPI_ERR_IN_STATUS) rc = sts[0].MPI_ERROR != MPI_SUCCESS ? sts[0].MPI_ERROR : sts[1].MPI_ERROR;
    if (rc == MPI_SUCCESS) *st = sts[0];
    return rc;
}

/* Sendrecv as Irecv + Isend, not MPI_Isendrecv: MPICH builds an Isendrecv as a schedule, with a
 * malloc/calloc/free per call (and malloc_consolidate), which cost random pairs 4x1 about 2 us of its
 * 24 us per iteration; MPI defines Sendrecv as equivalent to the pair. */
#define SENDRECV(NAME, IRECV, ISEND, CT)                                                                 \
    int MPI_##NAME(const void *sbuf, CT scount, MPI_Datatype stype, int dest, int stag, void *rbuf,    \
                   CT rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm, MPI_Status *st) {  \
        vm_enter(VMF_##NAME);                                                                          \
        if (!CTL)                                                                                      \
            return PMPI_##NAME(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, st); \
        MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;                                      \
        MPI_Request rq[2];                                                                             \
        int rc = PMPI_##IRECV(rbuf, rcount, rtype, src, rtag, comm, &rq[0]);                           \
        if (rc != MPI_SUCCESS) return rc;                                                              \
        int w = vm_world_rank(comm, dest);                                                             \
        vm_count_send(w);                                                                              \
        rc = sent(w, PMPI_##ISEND(sbuf, scount, stype, dest, stag, comm, &rq[1]));                     \
        if (rc != MPI_SUCCESS) {                                                                       \
            PMPI_Cancel(&rq[0]);                                                                       \
            PMPI_Request_free(&rq[0]);                                                                 \
            return rc;                                                                                 \
        }                                                                                              \
        rc = wait_pair(rq, s, vm_world_rank(comm, src), vm_counted_peer(vm_recv_peer(comm, src)));      \
        if (rc == MPI_SUCCESS) counted_recv(comm, s->MPI_SOURCE);                                      \
        return rc;                                                                                     \
    }

SENDRECV(Sendrecv, Irecv, Isend, int)
SENDRECV(Sendrecv_c, Irecv_c, Isend_c, MPI_Count)

#define SENDRECV_REPLACE(NAME, INAME, CT)                                                                \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, int dest, int stag, int src, int rtag,        \
                   MPI_Comm comm, MPI_Status *st) {                                                    \
        vm_enter(VMF_##NAME);                                                                          \
        if (!CTL) return PMPI_##NAME(buf, count, dt, dest, stag, src, rtag, comm, st);                 \
        MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;                                      \
        MPI_Request rq;                                                                                \
        int w = vm_world_rank(comm, dest);                                                             \
        vm_count_send(w);                                                                              \
        int rc = sent(w, PMPI_##INAME(buf, count, dt, dest, stag, src, rtag, comm, &rq));              \
        if (rc != MPI_SUCCESS) return rc;                                                              \
        rc = wait1(&rq, s, vm_world_rank(comm, src), vm_counted_peer(vm_recv_peer(comm, src)));          \
        if (rc == MPI_SUCCESS) counted_recv(comm, s->MPI_SOURCE);                                      \
        return rc;                                                                                     \
    }

SENDRECV_REPLACE(Sendrecv_replace, Isendrecv_replace, int)
SENDRECV_REPLACE(Sendrecv_replace_c, Isendrecv_replace_c, MPI_Count)

/* MPI_Isendrecv and MPI_Isendrecv_replace (MPI 4.0): one request for a send and a receive. The send is
 * counted before it starts, as every send is; the request is tracked as a receive from `src` and counted
 * when a Wait/Test reports it complete. Unwrapped, the send went uncounted: its receiver looked as though
 * nothing were on its way. From MPI_ANY_SOURCE it is counted blindly (one off the receiver's own count):
 * MPICH 5.0.2 completes it with a status that is not the receive's (a ring of 4, receiving tag 11 from
 * any: tags 2, 12 and 14 and a wrong source in 3 of 12 statuses, without vmsched), so its MPI_SOURCE
 * cannot name the sender. */
#define ISENDRECV(NAME, CT)                                                                              \
    int MPI_##NAME(const void *sbuf, CT scount, MPI_Datatype stype, int dest, int stag, void *rbuf,    \
                   CT rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm, MPI_Request *rq) { \
        vm_enter(VMF_##NAME);                                                                          \
        int w = vm_world_rank(comm, dest);                                                             \
        vm_count_send(w);                                                                              \
        int rc = sent(w, PMPI_##NAME(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, rq)); \
        if (CTL && rc == MPI_SUCCESS) vm_track_recv(*rq, vm_recv_peer(comm, src));                     \
        return rc;                                                                                     \
    }

ISENDRECV(Isendrecv, int)
ISENDRECV(Isendrecv_c, MPI_Count)

#define ISENDRECV_REPLACE(NAME, CT)                                                                      \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, int dest, int stag, int src, int rtag,        \
                   MPI_Comm comm, MPI_Request *rq) {                                                   \
        vm_enter(VMF_##NAME);                                                                          \
        int w = vm_world_rank(comm, dest);                                                             \
        vm_count_send(w);                                                                              \
        int rc = sent(w, PMPI_##NAME(buf, count, dt, dest, stag, src, rtag, comm, rq));                \
        if (CTL && rc == MPI_SUCCESS) vm_track_recv(*rq, vm_recv_peer(comm, src));                     \
        return rc;                                                                                     \
    }

ISENDRECV_REPLACE(Isendrecv_replace, int)
ISENDRECV_REPLACE(Isendrecv_replace_c, MPI_Count)

/* ---------------------------------------------------------------------------------------------- */
/* probes and matched receives                                                                    */

int MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *st) {
    vm_enter(VMF_Probe);
    if (!CTL) return PMPI_Probe(src, tag, comm, st);
    int flag = 0, rc = PMPI_Iprobe(src, tag, comm, &flag, st);
    if (rc != MPI_SUCCESS || flag) return rc;
    vm.me->blocking_calls++;
    int w = vm_world_rank(comm, src);
    vm.wait.blocked = 1;
    vm.wait.recv = vm_counted_peer(vm_recv_peer(comm, src));
    for (;;) {
        vm_idle(w, &vm.wait.t0);
        if (!CTL) return PMPI_Probe(src, tag, comm, st);
        rc = PMPI_Iprobe(src, tag, comm, &flag, st);
        if (rc != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
    vm_enter(VMF_Iprobe);
    int rc = PMPI_Iprobe(src, tag, comm, flag, st);
    if (CTL) {
        if (*flag)
            vm.poll_fail = 0;
        else
            vm_poll_failed();
    }
    return rc;
}

/* Messages matched by a probe and not yet received, with the world rank of their sender (VM_UNCOUNTED
 * when the runtime did not count their send): MPI_Mrecv and MPI_Imrecv name a message, not its
 * communicator and source, so a message over an inter-communicator took one off its receiver's count
 * of counted messages (tests/c/nullpeer.c). A handful at most are pending at once; a message that finds
 * the table full is taken for any counted one, as before. */
#define VM_PROBED 64
static struct {
    MPI_Message msg;
    int from;
} vm_probed[VM_PROBED];
static int vm_nprobed;

static void probed(MPI_Comm comm, const MPI_Message *msg, const MPI_Status *s) {
    if (*msg != MPI_MESSAGE_NULL && *msg != MPI_MESSAGE_NO_PROC && vm_nprobed < VM_PROBED) {
        vm_probed[vm_nprobed].msg = *msg;
        vm_probed[vm_nprobed++].from = vm_recv_peer(comm, s->MPI_SOURCE);
    }
}

/* The sender's world rank of a probed message, forgotten now that it is received (-1: not known). */
static int probed_from(const MPI_Message *msg) {
    if (!msg || *msg == MPI_MESSAGE_NO_PROC) return VM_UNCOUNTED;
    for (int i = 0; i < vm_nprobed; i++)
        if (vm_probed[i].msg == *msg) {
            int from = vm_probed[i].from;
            vm_probed[i] = vm_probed[--vm_nprobed];
            return from;
        }
    return -1;
}

int MPI_Mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *st) {
    vm_enter(VMF_Mprobe);
    if (!CTL) return PMPI_Mprobe(src, tag, comm, msg, st);
    MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;
    int flag = 0, rc = PMPI_Improbe(src, tag, comm, &flag, msg, s);
    if (rc == MPI_SUCCESS && flag) probed(comm, msg, s);
    if (rc != MPI_SUCCESS || flag) return rc;
    vm.me->blocking_calls++;
    int w = vm_world_rank(comm, src);
    vm.wait.blocked = 1;
    vm.wait.recv = vm_counted_peer(vm_recv_peer(comm, src));
    for (;;) {
        vm_idle(w, &vm.wait.t0);
        if (!CTL) return PMPI_Mprobe(src, tag, comm, msg, st);
        rc = PMPI_Improbe(src, tag, comm, &flag, msg, s);
        if (rc == MPI_SUCCESS && flag) probed(comm, msg, s);
        if (rc != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Improbe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg, MPI_Status *st) {
    vm_enter(VMF_Improbe);
    MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;
    int rc = PMPI_Improbe(src, tag, comm, flag, msg, s);
    if (CTL && rc == MPI_SUCCESS) {
        if (*flag) {
            vm.poll_fail = 0;
            probed(comm, msg, s);
        } else
            vm_poll_failed();
    }
    return rc;
}

#define MRECV(NAME, INAME, CT)                                                                           \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *st) {           \
        vm_enter(VMF_##NAME);                                                                          \
        int from = probed_from(msg); /* before the call sets *msg to MPI_MESSAGE_NULL */               \
        if (!CTL) return PMPI_##NAME(buf, count, dt, msg, st);                                         \
        MPI_Status tmp, *s = st == MPI_STATUS_IGNORE ? &tmp : st;                                      \
        MPI_Request rq;                                                                                \
        int rc = PMPI_##INAME(buf, count, dt, msg, &rq);                                               \
        if (rc != MPI_SUCCESS) return rc;                                                              \
        rc = wait1(&rq, s, from == VM_UNCOUNTED ? -1 : from, vm_counted_peer(from));                   \
        if (rc == MPI_SUCCESS && from != VM_UNCOUNTED) vm_count_recv(from);                            \
        return rc;                                                                                     \
    }

MRECV(Mrecv, Imrecv, int)
MRECV(Mrecv_c, Imrecv_c, MPI_Count)

#define IMRECV(NAME, CT)                                                                                 \
    int MPI_##NAME(void *buf, CT count, MPI_Datatype dt, MPI_Message *msg, MPI_Request *rq) {          \
        vm_enter(VMF_##NAME);                                                                          \
        int from = probed_from(msg);                                                                   \
        int rc = PMPI_##NAME(buf, count, dt, msg, rq);                                                 \
        if (CTL && rc == MPI_SUCCESS) vm_track_recv(*rq, from);                                        \
        return rc;                                                                                     \
    }

IMRECV(Imrecv, int)
IMRECV(Imrecv_c, MPI_Count)

/* ---------------------------------------------------------------------------------------------- */
/* completion                                                                                     */

int MPI_Wait(MPI_Request *rq, MPI_Status *st) {
    vm_enter(VMF_Wait);
    MPI_Request before = *rq;
    struct stats t;
    st = stats_take(&t, st, 1);
    if (CTL) wait_for_colls(rq, 1);
    int rc = CTL ? wait1(rq, st, pending_source(rq, 1), pending_recv(rq, 1)) : PMPI_Wait(rq, st);
    if (vm_requests_watched() && rc == MPI_SUCCESS) vm_request_done(before, t.reported);
    stats_done(&t);
    return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
    vm_enter(VMF_Waitall);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    sts = stats_take(&t, sts, n);
    int rc, flag = 0;
    if (!CTL) {
        rc = PMPI_Waitall(n, reqs, sts);
    } else if ((rc = PMPI_Testall(n, reqs, &flag, sts)) == MPI_SUCCESS && !flag) {
        vm.me->blocking_calls++;
        int w = pending_source(reqs, n);
        vm.wait.blocked = 1;
        vm.wait.recv = pending_recv(reqs, n);
        wait_for_colls(reqs, n);
        for (;;) {
            vm_idle(w, &vm.wait.t0);
            if (!CTL) {
                rc = PMPI_Waitall(n, reqs, sts);
                break;
            }
            rc = PMPI_Testall(n, reqs, &flag, sts);
            if (rc != MPI_SUCCESS || flag) break;
        }
    }
    snap_done(&s, reqs, n, rc == MPI_SUCCESS, NULL, 0, t.reported);
    stats_done(&t);
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *st) {
    vm_enter(VMF_Waitany);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    st = stats_take(&t, st, 1);
    int rc, flag = 0;
    if (!CTL) {
        rc = PMPI_Waitany(n, reqs, idx, st);
    } else if ((rc = PMPI_Testany(n, reqs, idx, &flag, st)) == MPI_SUCCESS && !flag) {
        vm.me->blocking_calls++;
        int w = pending_source(reqs, n);
        vm.wait.blocked = 1;
        vm.wait.recv = pending_recv(reqs, n);
        wait_for_colls(reqs, n);
        for (;;) {
            vm_idle(w, &vm.wait.t0);
            if (!CTL) {
                rc = PMPI_Waitany(n, reqs, idx, st);
                break;
            }
            rc = PMPI_Testany(n, reqs, idx, &flag, st);
            if (rc != MPI_SUCCESS || flag) break;
        }
    }
    snap_done(&s, reqs, n, 0, idx, rc == MPI_SUCCESS, t.reported);
    stats_done(&t);
    return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idxs[], MPI_Status sts[]) {
    vm_enter(VMF_Waitsome);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    sts = stats_take(&t, sts, n);
    int rc;
    if (!CTL) {
        rc = PMPI_Waitsome(n, reqs, outcount, idxs, sts);
    } else if ((rc = PMPI_Testsome(n, reqs, outcount, idxs, sts)) == MPI_SUCCESS && *outcount == 0) {
        vm.me->blocking_calls++;
        int w = pending_source(reqs, n);
        vm.wait.blocked = 1;
        vm.wait.recv = pending_recv(reqs, n);
        wait_for_colls(reqs, n);
        for (;;) {
            vm_idle(w, &vm.wait.t0);
            if (!CTL) {
                rc = PMPI_Waitsome(n, reqs, outcount, idxs, sts);
                break;
            }
            rc = PMPI_Testsome(n, reqs, outcount, idxs, sts);
            if (rc != MPI_SUCCESS || *outcount != 0) break;
        }
    }
    snap_done(&s, reqs, n, 0, idxs, rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED ? *outcount : 0, t.reported);
    stats_done(&t);
    return rc;
}

static void polled(int done) {
    if (!CTL) return;
    if (done)
        vm.poll_fail = 0;
    else
        vm_poll_failed();
}

int MPI_Test(MPI_Request *rq, int *flag, MPI_Status *st) {
    vm_enter(VMF_Test);
    MPI_Request before = *rq;
    struct stats t;
    st = stats_take(&t, st, 1);
    int rc = PMPI_Test(rq, flag, st);
    if (vm_requests_watched() && rc == MPI_SUCCESS && *flag) vm_request_done(before, t.reported);
    stats_done(&t);
    if (rc == MPI_SUCCESS) polled(*flag);
    return rc;
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
    vm_enter(VMF_Testall);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    sts = stats_take(&t, sts, n);
    int rc = PMPI_Testall(n, reqs, flag, sts);
    snap_done(&s, reqs, n, rc == MPI_SUCCESS && *flag, NULL, 0, t.reported);
    stats_done(&t);
    if (rc == MPI_SUCCESS) polled(*flag);
    return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st) {
    vm_enter(VMF_Testany);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    st = stats_take(&t, st, 1);
    int rc = PMPI_Testany(n, reqs, idx, flag, st);
    snap_done(&s, reqs, n, 0, idx, rc == MPI_SUCCESS && *flag, t.reported);
    stats_done(&t);
    if (rc == MPI_SUCCESS) polled(*flag);
    return rc;
}

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idxs[], MPI_Status sts[]) {
    vm_enter(VMF_Testsome);
    struct snap s;
    snap_take(&s, reqs, n);
    struct stats t;
    sts = stats_take(&t, sts, n);
    int rc = PMPI_Testsome(n, reqs, outcount, idxs, sts);
    snap_done(&s, reqs, n, 0, idxs, rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED ? *outcount : 0, t.reported);
    stats_done(&t);
    if (rc == MPI_SUCCESS) polled(*outcount != 0);
    return rc;
}

int MPI_Request_free(MPI_Request *rq) {
    vm_enter(VMF_Request_free);
    if (vm.ntracked) vm_untrack(*rq);
    if (vm.ncoll) vm_coll_done(*rq);
    vm_persist_free(*rq);
    return PMPI_Request_free(rq);
}

/* Persistent point-to-point (MPI_Send_init ... MPI_Start): the init calls record each request's peer
 * and kind, and a start counts its sends and tracks its receives as the nonblocking calls do; the
 * completion wrappers above count a receive from what they report completed. Uncounted, a halo
 * exchanged with persistent requests left every receiver looking like it waited for nobody (wait kind
 * SEND: never ready, never passed over) and its senders' counts at 0. */
#define PERSISTENT(NAME, CT, PEER, SEND)                                                                 \
    int MPI_##NAME(CONST_##SEND void *buf, CT count, MPI_Datatype dt, int PEER, int tag, MPI_Comm comm, \
                   MPI_Request *rq) {                                                                  \
        vm_enter(VMF_##NAME);                                                                          \
        int rc = PMPI_##NAME(buf, count, dt, PEER, tag, comm, rq);                                     \
        if (rc == MPI_SUCCESS)                                                                         \
            vm_persist_add(*rq, comm, SEND ? vm_world_rank(comm, PEER) : vm_recv_peer(comm, PEER), SEND); \
        return rc;                                                                                     \
    }
#define CONST_1 const
#define CONST_0

PERSISTENT(Send_init, int, dest, 1)
PERSISTENT(Send_init_c, MPI_Count, dest, 1)
PERSISTENT(Ssend_init, int, dest, 1)
PERSISTENT(Ssend_init_c, MPI_Count, dest, 1)
PERSISTENT(Rsend_init, int, dest, 1)
PERSISTENT(Rsend_init_c, MPI_Count, dest, 1)
PERSISTENT(Bsend_init, int, dest, 1)
PERSISTENT(Bsend_init_c, MPI_Count, dest, 1)
PERSISTENT(Recv_init, int, src, 0)
PERSISTENT(Recv_init_c, MPI_Count, src, 0)

int MPI_Start(MPI_Request *rq) {
    vm_enter(VMF_Start);
    if (CTL) vm_persist_starting(rq, 1, 0);
    int rc = PMPI_Start(rq);
    if (CTL && rc == MPI_SUCCESS)
        vm_persist_started(rq, 1);
    else if (CTL)
        vm_persist_starting(rq, 1, 1); /* not started: take the counts back */
    return rc;
}

int MPI_Startall(int n, MPI_Request reqs[]) {
    vm_enter(VMF_Startall);
    if (CTL) vm_persist_starting(reqs, n, 0);
    int rc = PMPI_Startall(n, reqs);
    if (CTL && rc == MPI_SUCCESS)
        vm_persist_started(reqs, n);
    else if (CTL)
        vm_persist_starting(reqs, n, 1); /* not started: take the counts back */
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* collectives                                                                                    */
/* Always the blocking PMPI collective, whatever the mode: MPI does not match a blocking collective
 * with a nonblocking one, and ranks may see a partition change (and so change mode) at different
 * calls. While it waits, MPICH calls sched_yield in its progress loop; in CTL mode the runtime's
 * sched_yield hands the token on there (like the thesis's sginap wrapper). */

/* A wrapper that counts the call, waits for the token, and calls the PMPI function as it is (the
 * collectives here and the one-sided calls below). */
#define THROUGH(NAME, PARAMS, ...)                                                                     \
    int MPI_##NAME PARAMS {                                                                            \
        vm_enter(VMF_##NAME);                                                                          \
        return PMPI_##NAME(__VA_ARGS__);                                                               \
    }

/* A collective: as THROUGH, and the communicator its wait is for (keep_from_stale, libvmrt.c). */
#define COLLECTIVE(NAME, PARAMS, ...)                                                                  \
    int MPI_##NAME PARAMS {                                                                            \
        vm_enter(VMF_##NAME);                                                                          \
        vm.wait.comm = comm;                                                                           \
        return PMPI_##NAME(__VA_ARGS__);                                                               \
    }

#define SB const void *sendbuf
#define RB void *recvbuf

COLLECTIVE(Barrier, (MPI_Comm comm), comm)
COLLECTIVE(Bcast, (void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm), buf, count, dt, root, comm)
COLLECTIVE(Bcast_c, (void *buf, MPI_Count count, MPI_Datatype dt, int root, MPI_Comm comm), buf, count, dt,
     root, comm)
COLLECTIVE(Reduce, (SB, RB, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm), sendbuf, recvbuf,
     count, dt, op, root, comm)
COLLECTIVE(Reduce_c, (SB, RB, MPI_Count count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm), sendbuf,
     recvbuf, count, dt, op, root, comm)
COLLECTIVE(Allreduce, (SB, RB, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf, recvbuf,
     count, dt, op, comm)
COLLECTIVE(Allreduce_c, (SB, RB, MPI_Count count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf,
     recvbuf, count, dt, op, comm)
COLLECTIVE(Gather, (SB, int sc, MPI_Datatype st, RB, int rc, MPI_Datatype rt, int root, MPI_Comm comm), sendbuf,
     sc, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Gather_c, (SB, MPI_Count sc, MPI_Datatype st, RB, MPI_Count rc, MPI_Datatype rt, int root,
     MPI_Comm comm), sendbuf, sc, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Gatherv, (SB, int sc, MPI_Datatype st, RB, const int rcs[], const int displs[], MPI_Datatype rt,
     int root, MPI_Comm comm), sendbuf, sc, st, recvbuf, rcs, displs, rt, root, comm)
COLLECTIVE(Gatherv_c, (SB, MPI_Count sc, MPI_Datatype st, RB, const MPI_Count rcs[], const MPI_Aint displs[],
     MPI_Datatype rt, int root, MPI_Comm comm), sendbuf, sc, st, recvbuf, rcs, displs, rt, root, comm)
COLLECTIVE(Scatter, (SB, int sc, MPI_Datatype st, RB, int rc, MPI_Datatype rt, int root, MPI_Comm comm),
     sendbuf, sc, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Scatter_c, (SB, MPI_Count sc, MPI_Datatype st, RB, MPI_Count rc, MPI_Datatype rt, int root,
     MPI_Comm comm), sendbuf, sc, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Scatterv, (SB, const int scs[], const int displs[], MPI_Datatype st, RB, int rc, MPI_Datatype rt,
     int root, MPI_Comm comm), sendbuf, scs, displs, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Scatterv_c, (SB, const MPI_Count scs[], const MPI_Aint displs[], MPI_Datatype st, RB,
     MPI_Count rc, MPI_Datatype rt, int root, MPI_Comm comm), sendbuf, scs, displs, st, recvbuf, rc, rt, root, comm)
COLLECTIVE(Allgather, (SB, int sc, MPI_Datatype st, RB, int rc, MPI_Datatype rt, MPI_Comm comm), sendbuf, sc,
     st, recvbuf, rc, rt, comm)
COLLECTIVE(Allgather_c, (SB, MPI_Count sc, MPI_Datatype st, RB, MPI_Count rc, MPI_Datatype rt,
     MPI_Comm comm), sendbuf, sc, st, recvbuf, rc, rt, comm)
COLLECTIVE(Allgatherv, (SB, int sc, MPI_Datatype st, RB, const int rcs[], const int displs[],
     MPI_Datatype rt, MPI_Comm comm), sendbuf, sc, st, recvbuf, rcs, displs, rt, comm)
COLLECTIVE(Allgatherv_c, (SB, MPI_Count sc, MPI_Datatype st, RB, const MPI_Count rcs[],
     const MPI_Aint displs[], MPI_Datatype rt, MPI_Comm comm), sendbuf, sc, st, recvbuf, rcs, displs, rt, comm)
COLLECTIVE(Alltoall, (SB, int sc, MPI_Datatype st, RB, int rc, MPI_Datatype rt, MPI_Comm comm), sendbuf, sc,
     st, recvbuf, rc, rt, comm)
COLLECTIVE(Alltoall_c, (SB, MPI_Count sc, MPI_Datatype st, RB, MPI_Count rc, MPI_Datatype rt,
     MPI_Comm comm), sendbuf, sc, st, recvbuf, rc, rt, comm)
COLLECTIVE(Alltoallv, (SB, const int scs[], const int sd[], MPI_Datatype st, RB, const int rcs[],
     const int rd[], MPI_Datatype rt, MPI_Comm comm), sendbuf, scs, sd, st, recvbuf, rcs, rd, rt, comm)
COLLECTIVE(Alltoallv_c, (SB, const MPI_Count scs[], const MPI_Aint sd[], MPI_Datatype st, RB,
     const MPI_Count rcs[], const MPI_Aint rd[], MPI_Datatype rt, MPI_Comm comm), sendbuf, scs, sd, st, recvbuf,
     rcs, rd, rt, comm)
COLLECTIVE(Alltoallw, (SB, const int scs[], const int sd[], const MPI_Datatype sts[], RB, const int rcs[],
     const int rd[], const MPI_Datatype rts[], MPI_Comm comm), sendbuf, scs, sd, sts, recvbuf, rcs, rd, rts, comm)
COLLECTIVE(Alltoallw_c, (SB, const MPI_Count scs[], const MPI_Aint sd[], const MPI_Datatype sts[], RB,
     const MPI_Count rcs[], const MPI_Aint rd[], const MPI_Datatype rts[], MPI_Comm comm), sendbuf, scs, sd, sts,
     recvbuf, rcs, rd, rts, comm)
COLLECTIVE(Reduce_scatter, (SB, RB, const int rcs[], MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
     sendbuf, recvbuf, rcs, dt, op, comm)
COLLECTIVE(Reduce_scatter_c, (SB, RB, const MPI_Count rcs[], MPI_Datatype dt, MPI_Op op,
     MPI_Comm comm), sendbuf, recvbuf, rcs, dt, op, comm)
COLLECTIVE(Reduce_scatter_block, (SB, RB, int rc, MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
     sendbuf, recvbuf, rc, dt, op, comm)
COLLECTIVE(Reduce_scatter_block_c, (SB, RB, MPI_Count rc, MPI_Datatype dt, MPI_Op op,
     MPI_Comm comm), sendbuf, recvbuf, rc, dt, op, comm)
COLLECTIVE(Scan, (SB, RB, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf, recvbuf, count, dt, op,
     comm)
COLLECTIVE(Scan_c, (SB, RB, MPI_Count count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf, recvbuf,
     count, dt, op, comm)
COLLECTIVE(Exscan, (SB, RB, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf, recvbuf, count, dt,
     op, comm)
COLLECTIVE(Exscan_c, (SB, RB, MPI_Count count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), sendbuf, recvbuf,
     count, dt, op, comm)

/* Neighbourhood collectives wait as the others do (in MPICH's progress loop). The nonblocking
 * collectives start without waiting; their requests are recorded (vm_coll_started), so that a wait
 * for one is a collective's (wait_for_colls). */
#define ICOLLECTIVE(NAME, PARAMS, ...)                                                                 \
    int MPI_##NAME PARAMS {                                                                            \
        vm_enter(VMF_##NAME);                                                                          \
        int rc = PMPI_##NAME(__VA_ARGS__);                                                             \
        if (vm.mode != VM_OFF && rc == MPI_SUCCESS) vm_coll_started(*request, comm);                   \
        return rc;                                                                                     \
    }

ICOLLECTIVE(Ibarrier, (MPI_Comm comm, MPI_Request *request), comm, request)
ICOLLECTIVE(Ibcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request),
     buffer, count, datatype, root, comm, request)
ICOLLECTIVE(Ibcast_c, (void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
     MPI_Request *request), buffer, count, datatype, root, comm, request)
ICOLLECTIVE(Ireduce, (SB, RB, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, count, datatype, op, root, comm, request)
ICOLLECTIVE(Ireduce_c, (SB, RB, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, count, datatype, op, root, comm, request)
ICOLLECTIVE(Iallreduce, (SB, RB, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request),
     sendbuf, recvbuf, count, datatype, op, comm, request)
ICOLLECTIVE(Iallreduce_c, (SB, RB, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, count, datatype, op, comm, request)
ICOLLECTIVE(Igather, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype, int root,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
     request)
ICOLLECTIVE(Igather_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount, MPI_Datatype recvtype,
     int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
     comm, request)
ICOLLECTIVE(Igatherv, (SB, int sendcount, MPI_Datatype sendtype, RB, const int recvcounts[], const int displs[],
     MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf,
     recvcounts, displs, recvtype, root, comm, request)
ICOLLECTIVE(Igatherv_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, const MPI_Count recvcounts[],
     const MPI_Aint displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount,
     sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request)
ICOLLECTIVE(Iscatter, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype, int root,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
     request)
ICOLLECTIVE(Iscatter_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount, MPI_Datatype recvtype,
     int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
     comm, request)
ICOLLECTIVE(Iscatterv, (SB, const int sendcounts[], const int displs[], MPI_Datatype sendtype, RB, int recvcount,
     MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcounts, displs, sendtype,
     recvbuf, recvcount, recvtype, root, comm, request)
ICOLLECTIVE(Iscatterv_c, (SB, const MPI_Count sendcounts[], const MPI_Aint displs[], MPI_Datatype sendtype, RB,
     MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request), sendbuf, sendcounts,
     displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
ICOLLECTIVE(Iallgather, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
ICOLLECTIVE(Iallgather_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount,
     recvtype, comm, request)
ICOLLECTIVE(Iallgatherv, (SB, int sendcount, MPI_Datatype sendtype, RB, const int recvcounts[], const int displs[],
     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcounts,
     displs, recvtype, comm, request)
ICOLLECTIVE(Iallgatherv_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, const MPI_Count recvcounts[],
     const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype,
     recvbuf, recvcounts, displs, recvtype, comm, request)
ICOLLECTIVE(Ialltoall, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
ICOLLECTIVE(Ialltoall_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount,
     recvtype, comm, request)
ICOLLECTIVE(Ialltoallv, (SB, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, RB,
     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf,
     sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
ICOLLECTIVE(Ialltoallv_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[], MPI_Datatype sendtype, RB,
     const MPI_Count recvcounts[], const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
     MPI_Request *request), sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
     request)
ICOLLECTIVE(Ialltoallw, (SB, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[], RB,
     const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request *request),
     sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
ICOLLECTIVE(Ialltoallw_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
     RB, const MPI_Count recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
     MPI_Request *request), sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
     request)
ICOLLECTIVE(Ireduce_scatter, (SB, RB, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
ICOLLECTIVE(Ireduce_scatter_c, (SB, RB, const MPI_Count recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
ICOLLECTIVE(Ireduce_scatter_block, (SB, RB, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, recvcount, datatype, op, comm, request)
ICOLLECTIVE(Ireduce_scatter_block_c, (SB, RB, MPI_Count recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
     MPI_Request *request), sendbuf, recvbuf, recvcount, datatype, op, comm, request)
ICOLLECTIVE(Iscan, (SB, RB, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request), sendbuf,
     recvbuf, count, datatype, op, comm, request)
ICOLLECTIVE(Iscan_c, (SB, RB, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request),
     sendbuf, recvbuf, count, datatype, op, comm, request)
ICOLLECTIVE(Iexscan, (SB, RB, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request),
     sendbuf, recvbuf, count, datatype, op, comm, request)
ICOLLECTIVE(Iexscan_c, (SB, RB, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request),
     sendbuf, recvbuf, count, datatype, op, comm, request)
COLLECTIVE(Neighbor_allgather, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
COLLECTIVE(Neighbor_allgather_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
ICOLLECTIVE(Ineighbor_allgather, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
ICOLLECTIVE(Ineighbor_allgather_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount,
     recvtype, comm, request)
COLLECTIVE(Neighbor_allgatherv, (SB, int sendcount, MPI_Datatype sendtype, RB, const int recvcounts[],
     const int displs[], MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcounts,
     displs, recvtype, comm)
COLLECTIVE(Neighbor_allgatherv_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, const MPI_Count recvcounts[],
     const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcounts,
     displs, recvtype, comm)
ICOLLECTIVE(Ineighbor_allgatherv, (SB, int sendcount, MPI_Datatype sendtype, RB, const int recvcounts[],
     const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype,
     recvbuf, recvcounts, displs, recvtype, comm, request)
ICOLLECTIVE(Ineighbor_allgatherv_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, const MPI_Count recvcounts[],
     const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype,
     recvbuf, recvcounts, displs, recvtype, comm, request)
COLLECTIVE(Neighbor_alltoall, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
COLLECTIVE(Neighbor_alltoall_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
ICOLLECTIVE(Ineighbor_alltoall, (SB, int sendcount, MPI_Datatype sendtype, RB, int recvcount, MPI_Datatype recvtype,
     MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
ICOLLECTIVE(Ineighbor_alltoall_c, (SB, MPI_Count sendcount, MPI_Datatype sendtype, RB, MPI_Count recvcount,
     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf, sendcount, sendtype, recvbuf, recvcount,
     recvtype, comm, request)
COLLECTIVE(Neighbor_alltoallv, (SB, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, RB,
     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcounts, sdispls,
     sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
COLLECTIVE(Neighbor_alltoallv_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[], MPI_Datatype sendtype, RB,
     const MPI_Count recvcounts[], const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm), sendbuf, sendcounts,
     sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
ICOLLECTIVE(Ineighbor_alltoallv, (SB, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, RB,
     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request), sendbuf,
     sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
ICOLLECTIVE(Ineighbor_alltoallv_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[], MPI_Datatype sendtype,
     RB, const MPI_Count recvcounts[], const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
     MPI_Request *request), sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
     request)
COLLECTIVE(Neighbor_alltoallw, (SB, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
     RB, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm), sendbuf,
     sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)
COLLECTIVE(Neighbor_alltoallw_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
     const MPI_Datatype sendtypes[], RB, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
     const MPI_Datatype recvtypes[], MPI_Comm comm), sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts,
     rdispls, recvtypes, comm)
ICOLLECTIVE(Ineighbor_alltoallw, (SB, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
     RB, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
     MPI_Request *request), sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
     request)
ICOLLECTIVE(Ineighbor_alltoallw_c, (SB, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
     const MPI_Datatype sendtypes[], RB, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
     const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request *request), sendbuf, sendcounts, sdispls, sendtypes,
     recvbuf, recvcounts, rdispls, recvtypes, comm, request)

/* ---------------------------------------------------------------------------------------------- */
/* one-sided communication                                                                        */
/* Passed through as collectives are, counted: MPICH waits in them by calling ucp_worker_progress in a
 * loop (not sched_yield), and the runtime's hook on that function hands the token on (libvmrt.c). The
 * request-based forms complete in MPI_Wait/Test, which are wrapped; their requests are not receives. */

THROUGH(Win_create, (void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win),
     base, size, disp_unit, info, comm, win)
THROUGH(Win_create_c, (void *base, MPI_Aint size, MPI_Aint disp_unit, MPI_Info info, MPI_Comm comm,
     MPI_Win *win), base, size, disp_unit, info, comm, win)
THROUGH(Win_allocate, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
     MPI_Win *win), size, disp_unit, info, comm, baseptr, win)
THROUGH(Win_allocate_c, (MPI_Aint size, MPI_Aint disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
     MPI_Win *win), size, disp_unit, info, comm, baseptr, win)
THROUGH(Win_allocate_shared, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
     MPI_Win *win), size, disp_unit, info, comm, baseptr, win)
THROUGH(Win_allocate_shared_c, (MPI_Aint size, MPI_Aint disp_unit, MPI_Info info, MPI_Comm comm,
     void *baseptr, MPI_Win *win), size, disp_unit, info, comm, baseptr, win)
THROUGH(Win_create_dynamic, (MPI_Info info, MPI_Comm comm, MPI_Win *win), info, comm, win)
THROUGH(Win_free, (MPI_Win *win), win)
THROUGH(Win_fence, (int mode, MPI_Win win), mode, win)
THROUGH(Win_post, (MPI_Group group, int mode, MPI_Win win), group, mode, win)
THROUGH(Win_start, (MPI_Group group, int mode, MPI_Win win), group, mode, win)
THROUGH(Win_complete, (MPI_Win win), win)
THROUGH(Win_wait, (MPI_Win win), win)
THROUGH(Win_lock, (int lock_type, int rank, int mode, MPI_Win win), lock_type, rank, mode, win)
THROUGH(Win_unlock, (int rank, MPI_Win win), rank, win)
THROUGH(Win_lock_all, (int mode, MPI_Win win), mode, win)
THROUGH(Win_unlock_all, (MPI_Win win), win)
THROUGH(Win_flush, (int rank, MPI_Win win), rank, win)
THROUGH(Win_flush_all, (MPI_Win win), win)
THROUGH(Win_flush_local, (int rank, MPI_Win win), rank, win)
THROUGH(Win_flush_local_all, (MPI_Win win), win)
THROUGH(Put, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
     MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win), origin_addr,
     origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
THROUGH(Put_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int
     target_rank, MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Win win),
     origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
THROUGH(Get, (void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint
     target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win), origin_addr, origin_count,
     origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
THROUGH(Get_c, (void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int target_rank,
     MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Win win), origin_addr,
     origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
THROUGH(Accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
     MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win),
     origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, op,
     win)
THROUGH(Accumulate_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int
     target_rank, MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Op op,
     MPI_Win win), origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
     target_datatype, op, win)
THROUGH(Get_accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, void
     *result_addr, int result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp, int
     target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win), origin_addr, origin_count,
     origin_datatype, result_addr, result_count, result_datatype, target_rank, target_disp, target_count,
     target_datatype, op, win)
THROUGH(Get_accumulate_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, void
     *result_addr, MPI_Count result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint
     target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win), origin_addr,
     origin_count, origin_datatype, result_addr, result_count, result_datatype, target_rank, target_disp,
     target_count, target_datatype, op, win)
THROUGH(Fetch_and_op, (const void *origin_addr, void *result_addr, MPI_Datatype datatype, int target_rank,
     MPI_Aint target_disp, MPI_Op op, MPI_Win win), origin_addr, result_addr, datatype, target_rank,
     target_disp, op, win)
THROUGH(Compare_and_swap, (const void *origin_addr, const void *compare_addr, void *result_addr, MPI_Datatype
     datatype, int target_rank, MPI_Aint target_disp, MPI_Win win), origin_addr, compare_addr, result_addr,
     datatype, target_rank, target_disp, win)
THROUGH(Rput, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
     MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request),
     origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win,
     request)
THROUGH(Rput_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int
     target_rank, MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Win win,
     MPI_Request *request), origin_addr, origin_count, origin_datatype, target_rank, target_disp,
     target_count, target_datatype, win, request)
THROUGH(Rget, (void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint
     target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request),
     origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win,
     request)
THROUGH(Rget_c, (void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int target_rank,
     MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Win win, MPI_Request
     *request), origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
     target_datatype, win, request)
THROUGH(Raccumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int
     target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win
     win, MPI_Request *request), origin_addr, origin_count, origin_datatype, target_rank, target_disp,
     target_count, target_datatype, op, win, request)
THROUGH(Raccumulate_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype, int
     target_rank, MPI_Aint target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Op op,
     MPI_Win win, MPI_Request *request), origin_addr, origin_count, origin_datatype, target_rank, target_disp,
     target_count, target_datatype, op, win, request)
THROUGH(Rget_accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, void
     *result_addr, int result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp, int
     target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win, MPI_Request *request), origin_addr,
     origin_count, origin_datatype, result_addr, result_count, result_datatype, target_rank, target_disp,
     target_count, target_datatype, op, win, request)
THROUGH(Rget_accumulate_c, (const void *origin_addr, MPI_Count origin_count, MPI_Datatype origin_datatype,
     void *result_addr, MPI_Count result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint
     target_disp, MPI_Count target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win, MPI_Request
     *request), origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype,
     target_rank, target_disp, target_count, target_datatype, op, win, request)

/* Polled like MPI_Test: a rank that keeps testing an exposure epoch must give way like a blocked one. */
int MPI_Win_test(MPI_Win win, int *flag) {
    vm_enter(VMF_Win_test);
    int rc = PMPI_Win_test(win, flag);
    if (rc == MPI_SUCCESS) polled(*flag);
    return rc;
}

/* MPI_Win_sync in a loop is how a program waits for a flag in a shared-memory window (loads and stores,
 * no message): two calls with no other MPI call between them are a poll that failed, and the rank gives
 * way as one polling with MPI_Test does. Otherwise the rank that is to set the flag never got the CPU:
 * such a loop, 4 ranks on one CPU, hung for good (tests/c/rma.c). */
int MPI_Win_sync(MPI_Win win) {
    static uint64_t after_last; /* mpi_calls just after this rank's last MPI_Win_sync */
    vm_enter(VMF_Win_sync);
    int rc = PMPI_Win_sync(win);
    if (CTL) {
        if (vm.me->mpi_calls == after_last + 1) vm_poll_failed();
        after_last = vm.me->mpi_calls;
    }
    return rc;
}
