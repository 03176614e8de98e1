"""The one definition of the shared-memory layout (thesis §3.5).

The CPU manager (Python, ctypes) and the runtime inside every rank (C, `vmruntime`) map the same
segment. Python defines the structures here; `c_header()` generates the C header the runtime is
compiled with, and a test compiles a C program against it to check every size and offset.

Ownership, so that no field has two writers that race:
- header, CPU table, job table partition fields, user_time_us: the CPU manager, under the table lock;
- rank slots: claimed by the runtime (or the manager, for non-MPI processes) under the table lock,
  then the counters are written only by the rank itself;
- rt_* fields of a job and wake words: the runtime's token protocol (atomics / futex).
"""

from __future__ import annotations

import ctypes as C

MAGIC = 0x564D53434845444D  # "VMSCHEDM"
VERSION = 1

MAX_CPUS = 256  # CPUs in the CPU table (and in one partition)
MAX_JOBS = 256
MAX_RANKS = 4096

# job.state
JOB_FREE, JOB_ADMITTED, JOB_RUNNING, JOB_ENDING = 0, 1, 2, 3
# job.queue
QUEUE_LOCAL, QUEUE_GLOBAL = 0, 1
# job.lbd_phase
LBD_OFF, LBD_MEASURING, LBD_STABLE, LBD_DECIDED = 0, 1, 2, 3
# job.heuristic (global queue: which rank gets a released token, thesis §4.3.1; "progress" first
# prefers a rank whose awaited message has arrived, see vmsched/vmruntime/README.md)
HEUR_SENDER, HEUR_UNCONSUMED, HEUR_AFFINITY, HEUR_RR, HEUR_PROGRESS = 0, 1, 2, 3, 4
# rank.state
RANK_FREE, RANK_RUNNING, RANK_WAITING, RANK_DONE = 0, 1, 2, 3
# rank.flags
RFLAG_STOPPED = 1  # the CPU manager sent SIGSTOP and owes a SIGCONT
RFLAG_EXTERNAL = 2  # registered through the API (not by the MPI runtime)

QUEUE_NAMES = {QUEUE_LOCAL: "local", QUEUE_GLOBAL: "global"}
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
        ("running_rank", C.c_int32),  # runtime: rank holding this CPU's token, -1 none
        ("last_rank", C.c_int32),  # runtime: last rank that ran here (affinity heuristic)
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
        ("generation", C.c_uint32),  # bumped when partition or queue type change
        ("ncpus", C.c_int32),  # partition size P
        ("leader_pid", C.c_int32),  # mpiexec (or other) process whose exit ends the job, 0 none
        ("registered", C.c_int32),  # ranks registered so far
        ("suspended", C.c_uint32),
        ("lbd_phase", C.c_uint32),
        ("admit_time", C.c_double),  # CLOCK_REALTIME seconds
        ("cvcs", C.c_double),
        ("ip", C.c_double),
        # Runtime token state (vmruntime's protocol; the manager only resets it).
        ("rt_lock", C.c_uint32),
        ("rt_generation", C.c_uint32),
        ("rt_tokens_free", C.c_int32),
        ("rt_next", C.c_int32),
        ("cpus", C.c_int16 * MAX_CPUS),  # the partition, in mapping order (rank r -> cpus[r % P])
        ("holder", C.c_int32 * MAX_CPUS),  # runtime: rank holding the token of cpus[i], -1 none
    ]


class RankEntry(C.Structure):
    _fields_ = [
        ("job_id", C.c_int32),
        ("rank", C.c_int32),
        ("pid", C.c_int32),
        ("state", C.c_uint32),
        ("flags", C.c_uint32),
        ("cpu", C.c_int32),  # CPU it last ran on
        ("job_slot", C.c_int32),  # index into the job table
        ("waiting_for", C.c_int32),  # rank it waits for a message from, -1 any / none
        ("wake", C.c_uint32),  # futex word: 1 = may run (token granted)
        ("has_token", C.c_uint32),
        ("ctx_switches", C.c_uint64),  # times it gave up its CPU at an MPI wait
        ("sent_not_consumed", C.c_int64),
        ("unconsumed", C.c_int64),  # messages sent to it not yet received
        ("user_time_us", C.c_uint64),  # written by the CPU manager from /proc
        ("mpi_calls", C.c_uint64),  # wrapped MPI calls (proves interposition)
        ("blocking_calls", C.c_uint64),  # wrapped calls that had to wait
    ]


def segment_size() -> int:
    return (
        C.sizeof(Header)
        + MAX_CPUS * C.sizeof(CpuEntry)
        + MAX_JOBS * C.sizeof(JobEntry)
        + (MAX_RANKS * C.sizeof(RankEntry))
    )


def offsets() -> dict[str, int]:
    """Byte offsets of the three tables inside the segment."""
    cpus = C.sizeof(Header)
    jobs = cpus + MAX_CPUS * C.sizeof(CpuEntry)
    ranks = jobs + MAX_JOBS * C.sizeof(JobEntry)
    return {"cpus": cpus, "jobs": jobs, "ranks": ranks}


class Segment(C.Structure):
    """The whole segment as one structure (fields laid out exactly as `offsets()` says)."""

    _fields_ = [
        ("header", Header),
        ("cpus", CpuEntry * MAX_CPUS),
        ("jobs", JobEntry * MAX_JOBS),
        ("ranks", RankEntry * MAX_RANKS),
    ]


_C_TYPES = {
    C.c_uint64: "uint64_t",
    C.c_uint32: "uint32_t",
    C.c_int32: "int32_t",
    C.c_int64: "int64_t",
    C.c_int16: "int16_t",
    C.c_double: "double",
}


def _c_field(name: str, ctype: type) -> str:
    if hasattr(ctype, "_length_"):
        return f"    {_C_TYPES[ctype._type_]} {name}[{ctype._length_}];"
    return f"    {_C_TYPES[ctype]} {name};"


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
    ]
    consts = {
        "JOB_FREE": JOB_FREE, "JOB_ADMITTED": JOB_ADMITTED, "JOB_RUNNING": JOB_RUNNING,
        "JOB_ENDING": JOB_ENDING, "QUEUE_LOCAL": QUEUE_LOCAL, "QUEUE_GLOBAL": QUEUE_GLOBAL,
        "HEUR_SENDER": HEUR_SENDER, "HEUR_UNCONSUMED": HEUR_UNCONSUMED, "HEUR_AFFINITY": HEUR_AFFINITY,
        "HEUR_RR": HEUR_RR, "HEUR_PROGRESS": HEUR_PROGRESS, "RANK_FREE": RANK_FREE, "RANK_RUNNING": RANK_RUNNING,
        "RANK_WAITING": RANK_WAITING, "RANK_DONE": RANK_DONE, "RFLAG_STOPPED": RFLAG_STOPPED,
        "RFLAG_EXTERNAL": RFLAG_EXTERNAL,
    }  # fmt: skip
    lines += [f"#define VM_{k} {v}" for k, v in consts.items()]
    for struct, cname in ((Header, "vm_header"), (CpuEntry, "vm_cpu"), (JobEntry, "vm_job"),
                          (RankEntry, "vm_rank")):  # fmt: skip
        lines.append(f"typedef struct {cname} {{")
        lines += [_c_field(n, t) for n, t in struct._fields_]
        lines.append(f"}} {cname};")
    lines += [
        "typedef struct vm_segment {",
        "    vm_header header;",
        "    vm_cpu cpus[VM_MAX_CPUS];",
        "    vm_job jobs[VM_MAX_JOBS];",
        "    vm_rank ranks[VM_MAX_RANKS];",
        "} vm_segment;",
        "#endif",
        "",
    ]
    return "\n".join(lines)
