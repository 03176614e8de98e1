"""The user commands: `vmsubmit`, `vmq`, `vmcancel`, `vmacct` (batch-system style).

Exit codes scripts can rely on: 0 success, 1 the launcher refused (unknown job, bad request, ...),
2 bad command line, 3 no launcher answered.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from vmsched.config import ConfigError, format_cpu_list, load_config
from vmsched.launcher.acct import acct_row, energy_by_user
from vmsched.launcher.dependencies import parse_dependency
from vmsched.launcher.jobscript import PREFIX, directives, read_script, script_command
from vmsched.launcher.lifecycle import ACTIVE, FINISHED, JobState
from vmsched.launcher.requests import RequestError, export_env, parse_deadline, parse_duration, parse_procs, parse_time
from vmsched.protocol import Client, DaemonUnavailable, ProtocolError
from vmsched.tables import Column, console, fitted_table

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class LauncherClient(Client):
    def __init__(self, config: str | None, state_dir: str | None, timeout_s: float = 10.0) -> None:
        cfg = load_config(config, state_dir)
        super().__init__(cfg.launcher_socket, timeout_s, what="launcher")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="config file (default: $VMSCHED_CONFIG or <state-dir>/vmsched.toml)")
    p.add_argument("--state-dir", help="the daemons' state directory (default: $VMSCHED_STATE_DIR)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _run(prog: str, body: Callable[[], int]) -> int:
    try:
        return body()
    except (RequestError, ConfigError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ProtocolError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except DaemonUnavailable as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


# -- vmsubmit ------------------------------------------------------------------------------------
class _DirectiveParser(argparse.ArgumentParser):
    """Parses one #VMSCHED line: errors become RequestError, named by the caller with file and line."""

    def error(self, message: str) -> NoReturn:
        raise RequestError(message)


def _submit_options(p: argparse.ArgumentParser) -> None:
    """The options of vmsubmit, the same on the command line and in #VMSCHED lines."""
    size = p.add_mutually_exclusive_group()
    size.add_argument("-n", "--ntasks", type=int, help="rigid job: exactly N ranks")
    size.add_argument("--procs", help="moldable job: allowed rank counts, e.g. 32,16,8 or 4-16")
    p.add_argument("--class", dest="job_class", choices=("long", "short"), help="job class (else from --time)")
    p.add_argument("-t", "--time", help="requested run time, e.g. 90s, 10m, 1:30:00")
    p.add_argument("--max-mpl", type=int, help="how far the job may be folded (ranks per CPU)")
    p.add_argument("--deadline", help="finish by: +30m, 2026-11-21T18:00 or epoch seconds")
    p.add_argument("--begin", help="do not start before: +30m, 2026-11-21T18:00 or epoch seconds")
    p.add_argument("-d", "--dependency", help="start after other jobs: afterok:ID[:ID...] or afterany:ID[:ID...]")
    p.add_argument("-J", "--name", help="job name (default: the program's name)")
    p.add_argument("-o", "--output", help="stdout file (default: vmsched-<id>.out in the job's directory)")
    p.add_argument("-e", "--error", help="stderr file (default: with stdout)")
    p.add_argument("-D", "--chdir", help="the job's working directory (default: the current one)")
    p.add_argument("--export", help="environment: ALL (default), NONE, or NAME,NAME=value,... (with ALL: added)")
    p.add_argument("-W", "--wait", action="store_true", default=None,
                   help="wait for the job to end and exit with its exit code")  # fmt: skip


def _apply_directives(args: argparse.Namespace, script: str, text: str) -> None:
    """Fill every option the command line left unset from the script's #VMSCHED lines."""
    found = argparse.Namespace()
    parser = _DirectiveParser(prog=f"{PREFIX} in {script}", add_help=False)
    _submit_options(parser)
    try:
        lines = directives(text)
    except RequestError as e:
        raise RequestError(f"{script}: {e}") from None
    for number, words in lines:
        try:
            parser.parse_args(words, namespace=found)
        except RequestError as e:
            raise RequestError(f"{script} line {number}: {e}") from None
    sized = args.ntasks is not None or args.procs is not None  # the command line's size replaces the script's
    for key, value in vars(found).items():
        if value is not None and getattr(args, key, None) is None and not (sized and key in ("ntasks", "procs")):
            setattr(args, key, value)


def _exit_status(code: int | None) -> int:
    """A job's exit code as a process exit status (killed by a signal: 128 + signal, as the shell does)."""
    if code is None:
        return EXIT_REFUSED
    return 128 - code if code < 0 else min(code, 255)


def submit_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="vmsubmit", usage="vmsubmit (-n N | --procs LIST) [options] -- command [args...]\n"
                               "       vmsubmit [options] SCRIPT [args...]   (options also in #VMSCHED lines)",
        description="Submit an MPI job. It runs as `mpiexec -n N command` with virtual malleability.",
    )  # fmt: skip
    _submit_options(p)
    p.add_argument("--noop", action="store_true", help=argparse.SUPPRESS)  # benchmark baseline: a ping
    _common(p)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)

    def body() -> int:
        if args.command[:1] == ["--"]:
            command = args.command[1:]
        elif args.command:  # a job script: its #VMSCHED lines give the options the command line does not
            script, script_args = args.command[0], args.command[1:]
            text = read_script(script)
            _apply_directives(args, script, text)
            command = script_command(script, text, script_args)
            args.name = args.name or os.path.basename(script)  # not the interpreter's name
        else:
            command = []
        with LauncherClient(args.config, args.state_dir) as c:
            if args.noop:
                c.call("ping")
                return EXIT_OK
            if not command:
                p.error("no command given (vmsubmit -n 4 -- program args, or vmsubmit SCRIPT)")
            if args.ntasks is None and args.procs is None:
                p.error("give the number of ranks: -n N, or --procs 32,16,8 for a moldable job")
            if args.ntasks is not None and args.ntasks < 1:
                p.error(f"-n must be >= 1, got {args.ntasks}")
            if args.max_mpl is not None and args.max_mpl < 1:
                p.error(f"--max-mpl must be >= 1, got {args.max_mpl}")
            procs = [args.ntasks] if args.ntasks is not None else list(parse_procs(args.procs))
            cwd = os.getcwd()
            if args.chdir:
                cwd = os.path.abspath(os.path.expanduser(args.chdir))
                if not os.path.isdir(cwd):
                    raise RequestError(f"--chdir {args.chdir}: no such directory")
            now = time.time()
            req = {
                "name": args.name, "command": command, "cwd": cwd,
                "env": export_env(args.export, dict(os.environ)) if args.export else dict(os.environ),
                "procs": procs, "max_mpl": args.max_mpl, "job_class": args.job_class,
                "time_limit": parse_duration(args.time) if args.time else None,
                "deadline": parse_deadline(args.deadline, now) if args.deadline else None,
                "begin_time": parse_time(args.begin, now, "begin time") if args.begin else None,
                "dependency": [list(d) for d in parse_dependency(args.dependency)] if args.dependency else None,
                # Relative to the job's directory (-D), as the default output file is.
                "stdout": os.path.join(cwd, os.path.expanduser(args.output)) if args.output else None,
                "stderr": os.path.join(cwd, os.path.expanduser(args.error)) if args.error else None,
            }  # fmt: skip
            reply = c.call("submit", **req)
            if args.json:
                print(json.dumps({k: v for k, v in reply.items() if k != "ok"}), flush=True)
            else:
                print(f"Submitted job {reply['job']} ({reply['job_class']}, estimate {_dur(reply['estimate'])})",
                      flush=True)  # fmt: skip
            if not args.wait:
                return EXIT_OK
            while True:
                job = c.call("job", job=reply["job"])["job"]
                if job["state"] in FINISHED:
                    if not args.json:
                        print(f"job {job['id']} {job['state']} (exit code {job['exit_code']})")
                    return _exit_status(job["exit_code"])
                time.sleep(0.25)

    return _run("vmsubmit", body)


# -- vmq -----------------------------------------------------------------------------------------
def _partition(j: dict[str, Any]) -> tuple[str, str, str]:
    part = j.get("partition")
    if not part:
        return "-", "-", "-"
    lbd = f" ({part['lbd']})" if part.get("lbd") not in (None, "off", "decided") else ""
    return format_cpu_list(part["cpus"]) or "-", str(part["mpl"]), part["queue"] + lbd


# Columns of `vmq --format`: name -> (column, value of a queue entry at time `now`), in default order.
QueueField = Callable[[dict[str, Any], float], str]
Q_FIELDS: dict[str, tuple[Column, QueueField]] = {
    "id": (Column("ID"), lambda j, now: str(j["id"])),
    "user": (Column("USER", drop=2), lambda j, now: j["user"]),
    "name": (Column("NAME", flexible=True), lambda j, now: j["name"] or ""),
    "state": (Column("STATE"), lambda j, now: j["state"] + (" (susp)" if j["suspended"] else "")),
    "ranks": (Column("RANKS"), lambda j, now: str(j["nranks"]) if j["nranks"] else ",".join(map(str, j["procs"]))),
    "max_mpl": (Column("MAXMPL", drop=3), lambda j, now: str(j["cur_max_mpl"] or j["max_mpl"] or "-")),
    "cpus": (Column("CPUS"), lambda j, now: _partition(j)[0]),
    "mpl": (Column("MPL"), lambda j, now: _partition(j)[1]),
    "queue": (Column("QUEUE", flexible=True, drop=4), lambda j, now: _partition(j)[2]),
    "class": (Column("CLASS", drop=1), lambda j, now: j["job_class"]),
    "time": (Column("TIME"), lambda j, now: _dur(now - (j["start_time"] or j["submit_time"]))),
    "reason": (Column("REASON", flexible=True), lambda j, now: j.get("pending_reason") or j["reason"] or ""),
    "begin": (Column("BEGIN"), lambda j, now: _clock(j.get("begin_time"))),
    "dependency": (Column("DEPENDENCY", flexible=True), lambda j, now: _deps(j.get("dependency"))),
    "submit": (Column("SUBMIT"), lambda j, now: _clock(j["submit_time"])),
}
Q_DEFAULT = "id,user,name,state,ranks,max_mpl,cpus,mpl,queue,class,time,reason"


def _clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _deps(deps: list[list[Any]] | None) -> str:
    return ",".join(f"{k}:{i}" for k, i in deps) if deps else "-"


def _fields(text: str, known: dict[str, Any]) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise RequestError(f"--format: unknown field(s) {', '.join(bad) or '(none given)'}; "
                           f"choose from: {', '.join(known)}")  # fmt: skip
    return names


def _states(text: str, allowed: tuple[str, ...]) -> set[str]:
    states = {t.strip().lower() for t in text.split(",") if t.strip()}
    bad = sorted(states - set(allowed))
    if bad or not states:
        raise RequestError(f"-t/--state: unknown state(s) {', '.join(bad) or '(none given)'}; "
                           f"choose from: {', '.join(allowed)}")  # fmt: skip
    return states


def _users(text: str) -> set[str]:
    """-u/--user: comma-separated names, each a user of this node (a typo must not look like "no jobs")."""
    names = {u.strip() for u in text.split(",") if u.strip()}
    unknown = sorted(n for n in names if not _is_user(n))
    if unknown or not names:
        raise RequestError(f"-u/--user: unknown user(s) {', '.join(unknown) or '(none given)'}")
    return names


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def q_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmq", description="Show the queue and the running jobs.")
    p.add_argument("-j", "--job", type=int, help="details and history of one job")
    p.add_argument("-u", "--user", help="only this user's jobs (comma-separated names)")
    p.add_argument("-t", "--state", help=f"only jobs in these states ({', '.join(ACTIVE)}; comma-separated)")
    p.add_argument("--format", help=f"columns, comma-separated, of: {', '.join(Q_FIELDS)} (default: {Q_DEFAULT})")
    _common(p)
    args = p.parse_args(argv)

    def body() -> int:
        fields = _fields(args.format or Q_DEFAULT, Q_FIELDS)
        states = _states(args.state, ACTIVE) if args.state else None
        users = _users(args.user) if args.user else None
        with LauncherClient(args.config, args.state_dir) as c:
            if args.job is not None:
                info = c.call("job", job=args.job)
                if args.json:
                    print(json.dumps({k: v for k, v in info.items() if k != "ok"}, indent=2))
                else:
                    show_job(info, console())
                return EXIT_OK
            q = c.call("queue")
        q["jobs"] = [j for j in q["jobs"] if (states is None or j["state"] in states)
                     and (users is None or j["user"] in users)]  # fmt: skip
        if args.json:
            print(json.dumps({k: v for k, v in q.items() if k != "ok"}, indent=2))
            return EXIT_OK
        now = time.time()
        out = console()
        out.print(
            f"policy [bold]{q['policy']}[/]  CPUs {q['ncpus']}" + ("  [red]queue paused[/]" if q["paused"] else "")
        )
        rows = [[Q_FIELDS[f][1](j, now) for f in fields] for j in q["jobs"]]
        out.print(fitted_table([Q_FIELDS[f][0] for f in fields], rows, out.width))
        return EXIT_OK

    return _run("vmq", body)


def show_job(info: dict[str, Any], console: Console) -> None:
    j = info["job"]
    console.print(f"[bold]job {j['id']}[/] {j['name']}  user {j['user']}  state {j['state']}  class {j['job_class']}")
    console.print(f"command: {' '.join(j['command'])}   cwd: {j['cwd']}")
    t = Table("time", "event", "details", box=None, padding=(0, 1, 0, 0))
    t0 = j["submit_time"]
    for e in info["events"]:
        details = {k: v for k, v in e.items() if k not in ("time", "kind")}
        t.add_row(f"+{e['time'] - t0:.2f}s", e["kind"], json.dumps(details))
    console.print(t)


# -- vmcancel ------------------------------------------------------------------------------------
def cancel_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmcancel", description="Cancel queued or running jobs.")
    p.add_argument("jobs", nargs="+", type=int, metavar="JOB")
    _common(p)
    args = p.parse_args(argv)

    def body() -> int:
        rc = EXIT_OK
        results = []
        with LauncherClient(args.config, args.state_dir) as c:
            for job in args.jobs:
                try:
                    r = c.call("cancel", job=job)
                    results.append({"job": job, "ok": True, "was": r["was"]})
                    if not args.json:
                        print(f"job {job} cancelled (was {r['was']})")
                except ProtocolError as e:
                    rc = EXIT_REFUSED
                    results.append({"job": job, "ok": False, "error": str(e)})
                    print(f"vmcancel: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps(results))
        return rc

    return _run("vmcancel", body)


# -- vmacct --------------------------------------------------------------------------------------
AcctField = Callable[[dict[str, Any]], str]
A_FIELDS: dict[str, tuple[Column, AcctField]] = {
    "id": (Column("ID"), lambda r: str(r["id"])),
    "user": (Column("USER", drop=3), lambda r: r["user"]),
    "name": (Column("NAME", flexible=True), lambda r: r["name"] or ""),
    "state": (Column("STATE"), lambda r: r["state"]),
    "exit": (Column("EXIT"), lambda r: "-" if r["exit_code"] is None else str(r["exit_code"])),
    "class": (Column("CLASS", drop=4), lambda r: r["job_class"]),
    "ranks": (Column("RANKS"), lambda r: str(r["nranks"] or "-")),
    "wait": (Column("WAIT"), lambda r: _dur(r["wait"])),
    "run": (Column("RUN"), lambda r: _dur(r["run"])),
    "response": (Column("RESPONSE", drop=2), lambda r: _dur(r["response"])),
    "slowdown": (Column("SLOWDOWN", drop=5), lambda r: f"{r['slowdown']:.2f}" if r["slowdown"] else "-"),
    "mpl_history": (Column("MPL HISTORY", flexible=True, drop=1), lambda r: r["mpl_history"]),
    "cpu_s": (Column("CPU-S", drop=6), lambda r: _num(r["cpu_seconds"], 1)),
    "energy_j": (Column("ENERGY J", drop=7), lambda r: _num(r.get("energy_j"), 1)),
    "energy_kwh": (Column("KWH"), lambda r: _num(None if r.get("energy_j") is None else r["energy_j"] / 3.6e6, 6)),
    "submit": (Column("SUBMIT"), lambda r: _clock(r["submit_time"])),
    "start": (Column("START"), lambda r: _clock(r["start_time"])),
    "end": (Column("END"), lambda r: _clock(r["end_time"])),
}
A_DEFAULT = "id,user,name,state,exit,class,ranks,wait,run,response,slowdown,mpl_history,energy_j"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def acct_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmacct", description="Finished jobs: times, sizes, folding, energy, metrics.")
    p.add_argument("--limit", type=int, default=1000, help="at most this many recent jobs")
    p.add_argument("-u", "--user", help="only this user's jobs (root: anyone's)")
    p.add_argument("-S", "--starttime", help="only jobs that ended at or after this time (ISO, epoch, -1h, now)")
    p.add_argument("-E", "--endtime", help="only jobs submitted at or before this time")
    p.add_argument("--format", help=f"columns, comma-separated, of: {', '.join(A_FIELDS)} (default: {A_DEFAULT})")
    p.add_argument("-p", "--parsable", action="store_true", help="'|'-separated fields with a header line")
    p.add_argument("--swf", metavar="FILE", help="write these jobs as an SWF log (for vmreplay / vmsim)")
    _common(p)
    args = p.parse_args(argv)

    def body() -> int:
        if args.limit < 1:
            raise RequestError("--limit must be >= 1")
        fields = _fields(args.format or A_DEFAULT, A_FIELDS)
        now = time.time()
        query: dict[str, Any] = {"limit": args.limit}
        if args.user:
            if len(_users(args.user)) != 1:
                raise RequestError("-u/--user: vmacct takes one user name")
            query["user"] = args.user.strip()
        if args.starttime:
            query["start"] = parse_time(args.starttime, now, "start time")
        if args.endtime:
            query["end"] = parse_time(args.endtime, now, "end time")
        with LauncherClient(args.config, args.state_dir) as c:
            jobs = c.call("acct", **query)["jobs"]
            ncpus = c.call("info")["ncpus"] if args.swf else 0
        rows = [acct_row(j) for j in jobs]
        if args.swf:
            return _write_swf(rows, ncpus, args.swf)
        if args.json:
            print(json.dumps(rows, indent=2))
        elif args.parsable:
            print("|".join(A_FIELDS[f][0].header for f in fields))
            for r in rows:
                print("|".join(A_FIELDS[f][1](r) for f in fields))
        else:
            out = console()
            out.print(fitted_table([A_FIELDS[f][0] for f in fields], [[A_FIELDS[f][1](r) for f in fields]
                                                                       for r in rows], out.width))  # fmt: skip
            per_user = [[u["user"], str(u["jobs"]), f"{u['cpu_seconds']:.1f}", f"{u['energy_j']:.1f}",
                         f"{u['energy_kwh']:.6f}"] for u in energy_by_user(rows)]  # fmt: skip
            if per_user:
                columns = [Column("USER"), Column("JOBS"), Column("CPU-S"), Column("ENERGY J"), Column("KWH")]
                out.print(fitted_table(columns, per_user, out.width, title="energy by user"))
        return EXIT_OK

    return _run("vmacct", body)


def _write_swf(rows: list[dict[str, Any]], ncpus: int, path: str) -> int:
    """The node's history as an SWF log, through the one SWF writer (vmsched.workloads)."""
    from vmsched.launcher.history import job_records
    from vmsched.workloads.metrics import result_log
    from vmsched.workloads.swf import write_swf

    records = job_records(rows)
    status = {r["id"]: SWF_STATUS.get(r["state"], -1) for r in rows}
    try:
        write_swf(result_log(records, cpus=ncpus, notes=["vmacct --swf: this node's job history"], status=status),
                  path)  # fmt: skip
    except OSError as e:
        raise RequestError(f"cannot write {path}: {e.strerror}") from None
    print(f"wrote {len(records)} jobs to {path}")
    return EXIT_OK


# SWF field 11 (status): 1 completed, 0 failed, 5 cancelled (Parallel Workloads Archive definition).
SWF_STATUS = {JobState.COMPLETED: 1, JobState.FAILED: 0, JobState.TIMEOUT: 0, JobState.LOST: 0, JobState.CANCELLED: 5}
