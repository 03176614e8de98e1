"""The one definition of the shared-memory layout (thesis §3.5) and of the protocol constants.

Two kinds of segment (see docs/security.md for why):
- the node table (`Segment`): header, CPU table, job table. Created by the CPU manager (root), mode
  0644: every rank maps it read-only; only the manager writes it, through `table.SharedTable`, under
  the table lock.
- one job segment per job (`JobSegment`): the job's token state and its rank slots (slot = MPI rank; under
  Slurm, docs/slurm.md, the rank's place among the ranks of its node).
  Created by the manager under an unguessable name (written into the job's entry), owned by the job's
  user, mode 0600: only that user's processes can map it. The ranks write it (token protocol with
  atomics and futexes; each rank its own slot); the manager reads it only as an untrusted copy
  (`JobSegmentFile.snapshot`) and never acts on a pid found there before it verified the process.

Python defines the structures here; `c_header()` generates the C header the runtime is compiled with
(structures and constants), and a test compiles a C program against it to check every size and offset.
"""

from __future__ import annotations

import ctypes as C

MAGIC = 0x564D53434845444D  # "VMSCHEDM"
JOB_MAGIC = 0x564D534A4F425254  # "VMSJOBRT"
VERSION = 9

MAX_CPUS = 256  # CPUs in the CPU table (and in one partition)
MAX_JOBS = 256
MAX_RANKS = 1024  # ranks of one job (slots of a job segment)
NAME_LEN = 64  # bytes of a job segment's name, NUL included
SHM_SUFFIX_LEN = 32  # bytes of a rank's MPICH segment name after MPICH_SHM_PREFIX, NUL included
MPICH_SHM_PREFIX = "/dev/shm/mpich_shm_"  # MPICH's intranode segments (removed only in MPI_Finalize)
# UCX's (MPICH's ch4:ucx device): unlinked right after they are made and attached through /proc/<pid>/fd,
# so only a rank killed between the two leaves one (one did, in a run of the suite's supervisor tests).
UCX_SHM_PREFIX = "/dev/shm/ucx_shm_posix_"
JOB_SHM_PREFIXES = (MPICH_SHM_PREFIX, UCX_SHM_PREFIX)  # a job's segments that whoever started it may remove

# Protocol constants shared with the runtime (generated into the C header).
# rank.wake (a futex word): waits for a token / holds one (or must stop waiting) / sleeps in FUTEX_WAIT
# (only then does a giver need a FUTEX_WAKE) / waits yielding its CPU (a local queue whose waiting ranks
# all do leaves a token free for them to take; see vmsched/vmruntime/README.md)
WAKE_WAIT, WAKE_RUN, WAKE_SLEEP, WAKE_YIELD = 0, 1, 2, 3
# Two-phase waiting: a rank whose MPI calls have waited briefly (average below YIELD_WAIT_MAX_AVG_US from
# a call's first hand-off to its last resume) first waits by yielding its CPU for up to YIELD_WAIT_US of
# the call, then sleeps in the kernel.
YIELD_WAIT_US = 100
YIELD_WAIT_MAX_AVG_US = 30
# Repolling: a rank whose operation did not complete tests it again, up to REPOLLS times, before it hands
# its token on while messages sent to it have not been received (MPICH takes in one message per progress
# poll), and REPOLLS_OPAQUE times where its counters cannot tell (a collective, MPICH's own wait loops).
REPOLLS = 8
REPOLLS_OPAQUE = 4
LOCK_TIMEOUT_S = 1  # a lock held longer than this is taken to be stale (its holder died)
WAKE_MS = 100  # a sleeping rank re-checks the manager, its job and dead token holders this often

# job.state
JOB_FREE, JOB_ADMITTED, JOB_RUNNING, JOB_ENDING = 0, 1, 2, 3
# job.queue
QUEUE_LOCAL, QUEUE_GLOBAL = 0, 1
# job.placement: which local queue rank r of N is in, on P CPUs: r mod P (cyclic, thesis fig. 3.9) or
# r * P / N (block: neighbours in rank order share a CPU). partition.home_cpu is the one rule; libvmrt.c's
# home_of() the same in C.
PLACE_CYCLIC, PLACE_BLOCK = 0, 1
# job.lbd_phase
LBD_OFF, LBD_MEASURING, LBD_STABLE, LBD_DECIDED = 0, 1, 2, 3
# job.heuristic (global queue: which rank gets a released token, thesis §4.3.1; "progress" first
# prefers a rank whose awaited message has arrived, see vmsched/vmruntime/README.md)
HEUR_SENDER, HEUR_UNCONSUMED, HEUR_AFFINITY, HEUR_RR, HEUR_PROGRESS = 0, 1, 2, 3, 4
# rank.state
RANK_FREE, RANK_RUNNING, RANK_WAITING, RANK_DONE = 0, 1, 2, 3
# rank.flags
RFLAG_EXTERNAL = 2  # registered through the API (not by the MPI runtime)
RFLAG_SCHEDULED = 4  # its runtime has entered the token protocol (a hint among the job's ranks; the manager ignores it)
# rank.wait_kind: its wait includes a receive / is for sends only / cannot be told (a collective, a poll,
# MPICH's own loops). Only a receive can be completed by messages already sent to the rank.
WAIT_OPAQUE, WAIT_RECV, WAIT_SEND = 0, 1, 2

QUEUE_NAMES = {QUEUE_LOCAL: "local", QUEUE_GLOBAL: "global"}
PLACEMENT_NAMES = {PLACE_CYCLIC: "cyclic", PLACE_BLOCK: "block"}
LBD_NAMES = {LBD_OFF: "off", LBD_MEASURING: "measuring", LBD_STABLE: "stable", LBD_DECIDED: "decided"}
HEURISTIC_NAMES = {
    HEUR_SENDER: "sender",
    HEUR_UNCONSUMED: "unconsumed",
    HEUR_AFFINITY: "affinity",
    HEUR_RR: "rr",
    HEUR_PROGRESS: "progress",
}
DEFAULT_HEURISTIC = "progress"  # the one default of vm-cpumanager's admit and vmrun
RANK_STATE_NAMES = {RANK_FREE: "free", RANK_RUNNING: "running", RANK_WAITING: "waiting", RANK_DONE: "done"}


class Header(C.Structure):
    _fields_ = [
        ("magic", C.c_uint64),
        ("version", C.c_uint32),
        ("header_size", C.c_uint32),
        ("max_cpus", C.c_uint32),
        ("max_jobs", C.c_uint32),
        ("max_ranks", C.c_uint32),
        ("quantum_us", C.c_uint32),
        ("manager_pid", C.c_int32),
        ("shutdown", C.c_uint32),  # 1: the manager is gone for good; runtimes stop blocking
        ("heartbeat", C.c_uint64),  # quanta run so far; a runtime may watch it move
        ("generation", C.c_uint64),  # bumped on every table change
        ("ncpus", C.c_uint32),  # managed CPUs (entries used in the CPU table)
        ("queue_waiting", C.c_uint32),  # the launcher's wait queue is non-empty
    ]


class CpuEntry(C.Structure):
    _fields_ = [
        ("cpu", C.c_int32),  # OS CPU number
        ("job_id", C.c_int32),  # owning job, -1 when free
    ]


class JobEntry(C.Structure):
    _fields_ = [
        ("job_id", C.c_int32),
        ("state", C.c_uint32),
        ("nranks", C.c_int32),
        ("max_mpl", C.c_int32),
        ("mpl", C.c_int32),
        ("queue", C.c_uint32),
        ("heuristic", C.c_uint32),
        ("spin_us", C.c_uint32),
        ("generation", C.c_uint32),  # bumped when partition, queue type or placement change
        ("ncpus", C.c_int32),  # partition size P
        ("placement", C.c_uint32),  # PLACE_*: which local queue (CPU) each rank is in
        ("leader_pid", C.c_int32),  # mpiexec (or other) process whose exit ends the job, 0 none
        ("registered", C.c_int32),  # ranks the manager has verified so far
        ("suspended", C.c_uint32),
        ("lbd_phase", C.c_uint32),
        ("uid", C.c_uint32),  # the job's user: owner of its job segment and of its ranks
        ("admit_time", C.c_double),  # CLOCK_REALTIME seconds
        ("cvcs", C.c_double),
        ("ip", C.c_double),
        ("rt_name", C.c_char * NAME_LEN),  # the job segment's POSIX shm name
        ("cpus", C.c_int16 * MAX_CPUS),  # the partition, in mapping order (rank r -> cpus[home(r)])
    ]


class RankEntry(C.Structure):
    _fields_ = [
        ("job_id", C.c_int32),
        ("rank", C.c_int32),
        ("pid", C.c_int32),
        ("state", C.c_uint32),
        ("flags", C.c_uint32),
        ("cpu", C.c_int32),  # CPU it last ran on
        # 1 + the one CPU its runtime pinned it to for the token it was given (global queue, P > 1), 0
        # none: the giver pins the receiver only when this differs. A hint among the job's own ranks;
        # the manager does not read it.
        ("pinned_to", C.c_uint32),
        ("job_slot", C.c_int32),  # index into the job table
        ("waiting_for", C.c_int32),  # rank it waits for a message from, -1 any / none
        ("wake", C.c_uint32),  # futex word: 1 = may run (token granted)
        ("has_token", C.c_uint32),
        ("wait_kind", C.c_uint32),  # what its current wait is for: WAIT_* (a hint among the job's ranks)
        ("ctx_switches", C.c_uint64),  # times it gave up its CPU at an MPI wait
        ("sent_not_consumed", C.c_int64),
        ("unconsumed", C.c_int64),  # messages sent to it not yet received
        ("world_rank", C.c_int64),  # its rank in MPI_COMM_WORLD (slot = rank's place among its node's ranks)
        ("mpi_calls", C.c_uint64),  # wrapped MPI calls (proves interposition)
        ("blocking_calls", C.c_uint64),  # wrapped calls that had to wait
        # The MPICH segment it maps, after MPICH_SHM_PREFIX, written at registration: the manager removes
        # it once a killed job is released, and cannot read another user's /proc/PID/maps without
        # CAP_SYS_PTRACE, which its unit does not grant. Untrusted: removed only if the job's user owns it.
        ("mpich_shm", C.c_char * SHM_SUFFIX_LEN),
        # While it waits: when its MPI call began to wait (CLOCK_MONOTONIC ns), and how many tokens it was
        # granted in that call without completing it. Hints among the job's ranks (a long, fruitless wait
        # in a collective is passed over: libvmrt.c, is_stale); the manager does not read them.
        ("wait_since", C.c_int64),
        ("vain_grants", C.c_uint32),
    ]


class JobRt(C.Structure):
    """Head of a job segment: identity (written by the manager at creation) and the token state."""

    _fields_ = [
        ("magic", C.c_uint64),
        ("job_id", C.c_int32),
        ("nranks", C.c_int32),
        ("rt_lock", C.c_uint32),  # pid of the rank inside the token critical section, 0 free
        ("rt_generation", C.c_uint32),  # job generation the tokens were last rebuilt for
        ("rt_tokens_free", C.c_int32),
        ("rt_next", C.c_int32),
        ("holder", C.c_int32 * MAX_CPUS),  # rank holding the token of cpus[i], -1 none
        ("cpu_running", C.c_int32 * MAX_CPUS),  # by CPU-table index: rank holding its token, -1 none
        ("cpu_last", C.c_int32 * MAX_CPUS),  # by CPU-table index: last rank that ran there (affinity)
    ]


class JobSegment(C.Structure):
    """A whole job segment: rank r of the job lives in ranks[r]."""

    _fields_ = [("rt", JobRt), ("ranks", RankEntry * MAX_RANKS)]


class Segment(C.Structure):
    """The whole node table."""

    _fields_ = [
        ("header", Header),
        ("cpus", CpuEntry * MAX_CPUS),
        ("jobs", JobEntry * MAX_JOBS),
    ]


def segment_size() -> int:
    return C.sizeof(Segment)


def offsets() -> dict[str, int]:
    """Byte offsets of the tables inside the node table."""
    return {"cpus": Segment.cpus.offset, "jobs": Segment.jobs.offset}


def job_segment_size(nranks: int) -> int:
    """Bytes of a job segment for `nranks` ranks (only the slots it uses are mapped)."""
    return C.sizeof(JobRt) + nranks * C.sizeof(RankEntry)


_C_TYPES = {
    C.c_uint64: "uint64_t",
    C.c_uint32: "uint32_t",
    C.c_int32: "int32_t",
    C.c_int64: "int64_t",
    C.c_int16: "int16_t",
    C.c_double: "double",
    C.c_char: "char",
}


def _c_field(name: str, ctype: type) -> str:
    if hasattr(ctype, "_length_"):
        return f"    {_C_TYPES[ctype._type_]} {name}[{ctype._length_}];"
    return f"    {_C_TYPES[ctype]} {name};"


# The structures the header declares, by C name (vm_segment and vm_jobseg are written out by hand).
C_STRUCTS: dict[type, str] = {Header: "vm_header", CpuEntry: "vm_cpu", JobEntry: "vm_job", RankEntry: "vm_rank",
                              JobRt: "vm_jobrt"}  # fmt: skip
# Every structure the C side sees, for the layout tests.
ALL_C_STRUCTS: dict[str, type] = {**{v: k for k, v in C_STRUCTS.items()}, "vm_segment": Segment,
                                  "vm_jobseg": JobSegment}  # fmt: skip


def c_header() -> str:
    """C declarations of the layout, generated from the structures above."""
    lines = [
        "/* Generated by vmsched.cpumanager.shm_layout.c_header(); do not edit. */",
        "#ifndef VM_SHM_H",
        "#define VM_SHM_H",
        "#include <stdint.h>",
        f"#define VM_MAGIC 0x{MAGIC:016X}ULL",
        f"#define VM_VERSION {VERSION}",
        f"#define VM_MAX_CPUS {MAX_CPUS}",
        f"#define VM_MAX_JOBS {MAX_JOBS}",
        f"#define VM_MAX_RANKS {MAX_RANKS}",
        f"#define VM_JOB_MAGIC 0x{JOB_MAGIC:016X}ULL",
        f"#define VM_NAME_LEN {NAME_LEN}",
        f"#define VM_SHM_SUFFIX_LEN {SHM_SUFFIX_LEN}",
        f'#define VM_MPICH_SHM_PREFIX "{MPICH_SHM_PREFIX}"',
        f"#define VM_WAKE_WAIT {WAKE_WAIT}",
        f"#define VM_WAKE_RUN {WAKE_RUN}",
        f"#define VM_WAKE_SLEEP {WAKE_SLEEP}",
        f"#define VM_WAKE_YIELD {WAKE_YIELD}",
        f"#define VM_YIELD_WAIT_US {YIELD_WAIT_US}",
        f"#define VM_YIELD_WAIT_MAX_AVG_US {YIELD_WAIT_MAX_AVG_US}",
        f"#define VM_REPOLLS {REPOLLS}",
        f"#define VM_REPOLLS_OPAQUE {REPOLLS_OPAQUE}",
        f"#define VM_LOCK_TIMEOUT_S {LOCK_TIMEOUT_S}",
        f"#define VM_WAKE_MS {WAKE_MS}",
    ]
    consts = {
        "JOB_FREE": JOB_FREE, "JOB_ADMITTED": JOB_ADMITTED, "JOB_RUNNING": JOB_RUNNING,
        "JOB_ENDING": JOB_ENDING, "QUEUE_LOCAL": QUEUE_LOCAL, "QUEUE_GLOBAL": QUEUE_GLOBAL,
        "PLACE_CYCLIC": PLACE_CYCLIC, "PLACE_BLOCK": PLACE_BLOCK,
        "HEUR_SENDER": HEUR_SENDER, "HEUR_UNCONSUMED": HEUR_UNCONSUMED, "HEUR_AFFINITY": HEUR_AFFINITY,
        "HEUR_RR": HEUR_RR, "HEUR_PROGRESS": HEUR_PROGRESS, "RANK_FREE": RANK_FREE, "RANK_RUNNING": RANK_RUNNING,
        "RANK_WAITING": RANK_WAITING, "RANK_DONE": RANK_DONE, "RFLAG_EXTERNAL": RFLAG_EXTERNAL,
        "RFLAG_SCHEDULED": RFLAG_SCHEDULED, "WAIT_OPAQUE": WAIT_OPAQUE, "WAIT_RECV": WAIT_RECV,
        "WAIT_SEND": WAIT_SEND, "LBD_OFF": LBD_OFF, "LBD_MEASURING": LBD_MEASURING, "LBD_STABLE": LBD_STABLE,
        "LBD_DECIDED": LBD_DECIDED,
    }  # fmt: skip
    lines += [f"#define VM_{k} {v}" for k, v in consts.items()]
    for struct, cname in C_STRUCTS.items():
        lines.append(f"typedef struct {cname} {{")
        lines += [_c_field(n, t) for n, t in struct._fields_]
        lines.append(f"}} {cname};")
    lines += [
        "typedef struct vm_segment {",
        "    vm_header header;",
        "    vm_cpu cpus[VM_MAX_CPUS];",
        "    vm_job jobs[VM_MAX_JOBS];",
        "} vm_segment;",
        "typedef struct vm_jobseg {",
        "    vm_jobrt rt;",
        "    vm_rank ranks[VM_MAX_RANKS];",
        "} vm_jobseg;",
        "#endif",
        "",
    ]
    return "\n".join(lines)
