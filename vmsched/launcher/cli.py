"""The user commands: `vmsubmit`, `vmq`, `vmcancel`, `vmacct` (batch-system style).

Exit codes scripts can rely on: 0 success, 1 the launcher refused (unknown job, bad request, ...),
2 bad command line, 3 no launcher answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from vmsched.config import ConfigError, format_cpu_list, load_config
from vmsched.launcher.acct import acct_row
from vmsched.launcher.requests import RequestError, parse_deadline, parse_duration, parse_procs
from vmsched.protocol import Client, DaemonUnavailable, ProtocolError

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


def console() -> Console:
    """Wide enough for the tables when piped (rich would cut them at 80 columns)."""
    return Console(width=None if sys.stdout.isatty() else 200)


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


# -- vmsubmit ------------------------------------------------------------------------------------
def submit_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="vmsubmit", usage="vmsubmit (-n N | --procs LIST) [options] -- command [args...]",
        description="Submit an MPI job. It runs as `mpiexec -n N command` with virtual malleability.",
    )  # fmt: skip
    size = p.add_mutually_exclusive_group()
    size.add_argument("-n", "--ntasks", type=int, help="rigid job: exactly N ranks")
    size.add_argument("--procs", help="moldable job: allowed rank counts, e.g. 32,16,8 or 4-16")
    p.add_argument("--class", dest="job_class", choices=("long", "short"), help="job class (else from --time)")
    p.add_argument("-t", "--time", help="requested run time, e.g. 90s, 10m, 1:30:00")
    p.add_argument("--max-mpl", type=int, help="how far the job may be folded (ranks per CPU)")
    p.add_argument("--deadline", help="finish by: +30m, 2026-11-21T18:00 or epoch seconds")
    p.add_argument("-J", "--name", help="job name (default: the program's name)")
    p.add_argument("-o", "--output", help="stdout file (default: vmsched-<id>.out in the current directory)")
    p.add_argument("-e", "--error", help="stderr file (default: with stdout)")
    p.add_argument("--noop", action="store_true", help=argparse.SUPPRESS)  # benchmark baseline: a ping
    _common(p)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)

    def body() -> int:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        with LauncherClient(args.config, args.state_dir) as c:
            if args.noop:
                c.call("ping")
                return EXIT_OK
            if not command:
                p.error("no command given (vmsubmit -n 4 -- program args)")
            if args.ntasks is None and args.procs is None:
                p.error("give the number of ranks: -n N, or --procs 32,16,8 for a moldable job")
            if args.ntasks is not None and args.ntasks < 1:
                p.error(f"-n must be >= 1, got {args.ntasks}")
            if args.max_mpl is not None and args.max_mpl < 1:
                p.error(f"--max-mpl must be >= 1, got {args.max_mpl}")
            procs = [args.ntasks] if args.ntasks is not None else list(parse_procs(args.procs))
            req = {
                "name": args.name, "command": command, "cwd": os.getcwd(), "env": dict(os.environ),
                "procs": procs, "max_mpl": args.max_mpl, "job_class": args.job_class,
                "time_limit": parse_duration(args.time) if args.time else None,
                "deadline": parse_deadline(args.deadline) if args.deadline else None,
                "stdout": os.path.abspath(args.output) if args.output else None,
                "stderr": os.path.abspath(args.error) if args.error else None,
            }  # fmt: skip
            reply = c.call("submit", **req)
        if args.json:
            print(json.dumps({k: v for k, v in reply.items() if k != "ok"}))
        else:
            print(f"Submitted job {reply['job']} ({reply['job_class']}, estimate {_dur(reply['estimate'])})")
        return EXIT_OK

    return _run("vmsubmit", body)


# -- vmq -----------------------------------------------------------------------------------------
def _partition(j: dict[str, Any]) -> tuple[str, str, str]:
    part = j.get("partition")
    if not part:
        return "-", "-", "-"
    lbd = f" ({part['lbd']})" if part.get("lbd") not in (None, "off", "decided") else ""
    return format_cpu_list(part["cpus"]) or "-", str(part["mpl"]), part["queue"] + lbd


def q_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmq", description="Show the queue and the running jobs.")
    p.add_argument("-j", "--job", type=int, help="details and history of one job")
    _common(p)
    args = p.parse_args(argv)

    def body() -> int:
        with LauncherClient(args.config, args.state_dir) as c:
            if args.job is not None:
                info = c.call("job", job=args.job)
                if args.json:
                    print(json.dumps({k: v for k, v in info.items() if k != "ok"}, indent=2))
                else:
                    show_job(info, console())
                return EXIT_OK
            q = c.call("queue")
        if args.json:
            print(json.dumps({k: v for k, v in q.items() if k != "ok"}, indent=2))
            return EXIT_OK
        now = time.time()
        out = console()
        out.print(
            f"policy [bold]{q['policy']}[/]  CPUs {q['ncpus']}" + ("  [red]queue paused[/]" if q["paused"] else "")
        )
        t = Table("ID", "USER", "NAME", "STATE", "RANKS", "MAX MPL", "CPUS", "MPL", "QUEUE", "CLASS", "TIME", "REASON")
        for j in q["jobs"]:
            cpus, mpl, queue = _partition(j)
            ranks = str(j["nranks"]) if j["nranks"] else ",".join(map(str, j["procs"]))
            elapsed = now - (j["start_time"] or j["submit_time"])
            t.add_row(
                str(j["id"]), j["user"], j["name"] or "", j["state"] + (" (susp)" if j["suspended"] else ""), ranks,
                str(j["cur_max_mpl"] or j["max_mpl"] or "-"), cpus, mpl, queue, j["job_class"], _dur(elapsed),
                (j["reason"] or "")[:40],
            )  # fmt: skip
        out.print(t)
        return EXIT_OK

    return _run("vmq", body)


def show_job(info: dict[str, Any], console: Console) -> None:
    j = info["job"]
    console.print(f"[bold]job {j['id']}[/] {j['name']}  user {j['user']}  state {j['state']}  class {j['job_class']}")
    console.print(f"command: {' '.join(j['command'])}   cwd: {j['cwd']}")
    t = Table("time", "event", "details")
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
def acct_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmacct", description="Finished jobs: times, sizes, folding, metrics.")
    p.add_argument("--limit", type=int, default=1000, help="at most this many recent jobs")
    _common(p)
    args = p.parse_args(argv)

    def body() -> int:
        if args.limit < 1:
            raise RequestError("--limit must be >= 1")
        with LauncherClient(args.config, args.state_dir) as c:
            jobs = c.call("acct", limit=args.limit)["jobs"]
        rows = [acct_row(j) for j in jobs]
        if args.json:
            print(json.dumps(rows, indent=2))
            return EXIT_OK
        t = Table("ID", "USER", "NAME", "STATE", "EXIT", "CLASS", "RANKS", "WAIT", "RUN", "RESPONSE", "SLOWDOWN",
                  "MPL HISTORY")  # fmt: skip
        for r in rows:
            t.add_row(str(r["id"]), r["user"], r["name"], r["state"], str(r["exit_code"]), r["job_class"],
                      str(r["nranks"] or "-"), _dur(r["wait"]), _dur(r["run"]), _dur(r["response"]),
                      f"{r['slowdown']:.2f}" if r["slowdown"] else "-", r["mpl_history"])  # fmt: skip
        console().print(t)
        return EXIT_OK

    return _run("vmacct", body)
