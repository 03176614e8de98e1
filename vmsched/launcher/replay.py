"""`vmreplay`: run a workload on this node, for real, under one or more policies, and compare them.

    vmreplay WORKLOAD --policy fjt+easy:malleable --policy fcfs+easy:abort [--time-scale 10] [--out DIR]

WORKLOAD is a thesis parameter directory (template.txt, allowed_procs.txt, job_types.txt and an
arrival trace; `--trace` picks the trace file, default the directory's trace.swf) or an SWF trace that
lies in such a directory. Jobs are submitted to the launcher at their recorded arrival times divided
by `--time-scale`; each policy's run is written to DIR/<policy>/ (result.swf, report.md, partitions.png,
utilization.png) and all of them to DIR/comparison.md with response_by_class.png and relative_cdf.png.

By default it uses the running daemons (root may switch their policy between runs on an idle node);
with `--private` it starts its own CPU manager and launcher for each policy in a temporary state
directory, on all CPUs of this machine (or `--cpus`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from vmsched.apps.result import parse_result
from vmsched.config import load_config
from vmsched.held_signals import held_signals
from vmsched.launcher.acct import acct_row
from vmsched.launcher.history import job_records, partition_segments
from vmsched.launcher.lifecycle import JobState
from vmsched.protocol import Client, DaemonUnavailable, ProtocolError
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.metrics import relative_performance, result_log, summarize
from vmsched.workloads.params import JobRequest, job_requests, read_params
from vmsched.workloads.plots import plot_partitions, plot_relative_cdf, plot_response_by_class, plot_utilization
from vmsched.workloads.report import comparison_table, markdown, relative_tables, summary_tables
from vmsched.workloads.swf import write_swf

BIN = Path(sys.executable).parent


def load_workload(path: Path, trace: str | None) -> list[JobRequest]:
    """The job requests of a parameter directory (or of a trace inside one)."""
    if path.is_file():
        directory, trace_file = path.parent, path
    else:
        directory, trace_file = path, path / (trace or "trace.swf")
    files = [directory / n for n in ("template.txt", "allowed_procs.txt", "job_types.txt")]
    for f in files:
        if not f.exists():
            raise WorkloadError(f"missing {f.name}: a workload is a thesis parameter directory", f)
    return job_requests(read_params(*files, trace_file))


def submission(req: JobRequest, cwd: Path) -> dict[str, Any]:
    counts = [n for n in req.allowed_counts.choices() if n <= req.requested_procs]
    procs = sorted({req.requested_procs, *counts}, reverse=True)
    return {
        "name": req.name, "command": req.program_argv(), "cwd": str(cwd),
        "env": {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        "procs": procs, "job_class": req.job_class, "time_limit": req.estimate,
    }  # fmt: skip


class PrivateNode:
    """A CPU manager and a launcher of our own, on a temporary state directory."""

    def __init__(self, policy: str, cpus: str | None = None) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="vmreplay-")
        state = Path(self.dir.name)
        (state / "vmsched.toml").write_text(f'[launcher]\npolicy = "{policy}"\noverrun = "keep"\n')
        self.cfg = load_config(state_dir=state)
        env = {**os.environ, "VMSCHED_STATE_DIR": str(state)}
        log = open(state / "daemons.out", "ab")  # noqa: SIM115 - lives as long as the daemons
        argv = [str(BIN / "vm-cpumanager"), *(["--cpus", cpus] if cpus else [])]
        self.procs: list[subprocess.Popen] = []
        try:
            start_daemon(self.procs, argv, env, log)
            wait_up(Client(self.cfg.cpumanager_socket), self.procs)
            start_daemon(self.procs, [str(BIN / "vm-launcher")], env, log)
            wait_up(Client(self.cfg.launcher_socket), self.procs)
        except BaseException:  # not up (or interrupted while starting): stop what did start
            self.close()
            raise

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
        self.dir.cleanup()


def start_daemon(procs: list[subprocess.Popen], argv: list[str], env: dict[str, str], log: IO[bytes]) -> None:
    """Start a private node's daemon (vmreplay's, vmdemo's) into `procs`. In a session of its own, so that a
    terminal's Ctrl-C reaches the tool alone, which cancels the jobs (cancel_all) and then stops the daemons
    in order; under held_signals, so that a signal that comes while it starts waits for its handle."""
    with held_signals():
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True))


def cancel_all(launcher_socket: Path, tool: str, timeout_s: float = 60.0) -> None:
    """Cancel every job of a private node's launcher and wait until they have ended: an interrupted tool's
    jobs (vmreplay's, vmdemo's) must not outlive the daemons it started, and the launcher leaves running
    jobs running when it stops (they outlive a restart)."""
    try:
        launcher = Client(launcher_socket, timeout_s=10, what="launcher")
        for job in launcher.call("queue")["jobs"]:
            try:
                launcher.call("cancel", job=job["id"])
            except ProtocolError:
                pass  # it ended meanwhile
        deadline = time.monotonic() + timeout_s
        while launcher.call("queue")["jobs"] and time.monotonic() < deadline:
            time.sleep(0.2)
    except (DaemonUnavailable, ProtocolError) as e:
        print(f"{tool}: could not cancel the private node's jobs: {e}", file=sys.stderr)


def wait_up(c: Client, procs: list[subprocess.Popen]) -> None:
    for _ in range(600):
        if any(p.poll() is not None for p in procs):
            raise SystemExit("vmreplay: a daemon exited at start")
        try:
            c.call("ping")
            return
        except DaemonUnavailable:
            time.sleep(0.05)
    raise SystemExit("vmreplay: a daemon did not start")


def run_policy(launcher: Client, requests: list[JobRequest], scale: float, out: Path,
               console: Console) -> list[dict[str, Any]]:  # fmt: skip
    """Submit at the recorded times, wait for the last job, return its accounting rows."""
    jobs_dir = out / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    ids: list[int] = []
    t0 = time.time()
    first = requests[0].submit_time if requests else 0.0
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        sub = progress.add_task("submitted", total=len(requests))
        done = progress.add_task("finished ", total=len(requests))
        while True:
            now = time.time() - t0
            while len(ids) < len(requests) and (requests[len(ids)].submit_time - first) / scale <= now:
                ids.append(launcher.call("submit", **submission(requests[len(ids)], jobs_dir))["job"])
                progress.update(sub, completed=len(ids))
            finished = launcher.call("acct", jobs=ids)["jobs"] if ids else []
            progress.update(done, completed=len(finished))
            if len(ids) == len(requests) and len(finished) == len(ids):
                return [acct_row(j) for j in finished]
            time.sleep(0.5)


def verify_results(rows: list[dict[str, Any]], jobs_dir: Path) -> tuple[int, list[int]]:
    """Every job's application result must be there and verified."""
    bad = []
    for r in rows:
        try:
            ok = (
                r["state"] == JobState.COMPLETED
                and parse_result((jobs_dir / f"vmsched-{r['id']}.out").read_text())["verified"]
            )
        except (OSError, ValueError):
            ok = False
        if not ok:
            bad.append(r["id"])
    return len(rows) - len(bad), bad


def actions(rows: list[dict[str, Any]]) -> str:
    """What the policy did to running jobs: requeues (aborted windows) and MPL changes (folding)."""
    requeued = sum(r["requeues"] for r in rows)
    refolded = sum(1 for r in rows if "->" in r["mpl_history"])
    return f"aborted and requeued: {requeued} time(s); jobs whose MPL changed while running: {refolded}"


class Interrupted(Exception):
    """vmreplay was told to stop (SIGTERM, SIGINT, SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _interrupt(signum: int, _frame: object) -> None:
    # Raised where the main loop is, so that the private daemons and their jobs are stopped (the
    # default SIGTERM action would end the process and leave them running). Further signals are
    # ignored while that cleanup runs.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def slug(policy: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", policy)


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        return run(argv)
    except Interrupted as e:
        return 128 + e.signum


def run(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vmreplay", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)  # fmt: skip
    ap.add_argument("workload", type=Path, help="thesis parameter directory, or a trace inside one")
    ap.add_argument("--trace", help="trace file name inside the directory (default trace.swf)")
    ap.add_argument("--policy", action="append", help="policy spec; repeat to compare (default: the launcher's)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="divide arrival times by this (compression)")
    ap.add_argument("--out", type=Path, default=Path("results"), help="output directory (default ./results)")
    ap.add_argument("--private", action="store_true", help="start own daemons for each policy")
    ap.add_argument("--cpus", help="with --private: the CPUs they manage, e.g. 0-1 (default: all)")
    ap.add_argument("--state-dir", help="state directory of the running daemons (default: $VMSCHED_STATE_DIR)")
    args = ap.parse_args(argv)
    console = Console()
    if args.time_scale <= 0:
        ap.error("--time-scale must be > 0")
    args.out = args.out.resolve()  # the jobs' working directory must be absolute
    try:
        requests = load_workload(args.workload, args.trace)
    except WorkloadError as e:
        print(f"vmreplay: {e}", file=sys.stderr)
        return 1
    if not requests:
        print("vmreplay: the workload has no jobs", file=sys.stderr)
        return 1
    policies = args.policy or [None]
    summaries, records, ncpus = {}, {}, len(os.sched_getaffinity(0))
    for policy in policies:
        node = PrivateNode(policy or "fjt+easy:malleable", args.cpus) if args.private else None
        try:
            cfg = node.cfg if node else load_config(state_dir=args.state_dir)
            launcher = Client(cfg.launcher_socket, timeout_s=30, what="launcher")
            info = launcher.call("info")
            if policy and not node and info["policy"] != policy:
                info["policy"] = launcher.call("set_policy", policy=policy)["policy"]
            ncpus = info["ncpus"]
            name = info["policy"]
            out = args.out / slug(name)
            console.rule(escape(f"{name}: {len(requests)} jobs, time scale {args.time_scale}"))
            before = info.get("energy", {}).get("node_j")
            rows = run_policy(launcher, requests, args.time_scale, out, console)
            after = launcher.call("info").get("energy", {}).get("node_j")  # the node's, RAPL or model
            energy = None if before is None or after is None else after - before
        except (DaemonUnavailable, ProtocolError) as e:
            print(f"vmreplay: {e}", file=sys.stderr)
            return 1
        except Interrupted as e:
            print(f"vmreplay: {e}; cancelling this run's jobs", file=sys.stderr)
            if node:
                cancel_all(node.cfg.launcher_socket, "vmreplay")
            raise
        finally:
            if node:
                node.close()
        good, bad = verify_results(rows, out / "jobs")
        recs = job_records(rows)
        summaries[name], records[name] = summarize(recs, cpus=ncpus, energy_j=energy), recs
        write_swf(result_log(recs, cpus=ncpus, notes=[f"vmreplay policy {name}", f"time scale {args.time_scale}"]),
                  out / "result.swf")  # fmt: skip
        text = markdown(summary_tables(summaries[name], title=name))
        text += f"\n\n{good} of {len(rows)} jobs completed with a verified result" + (f"; not: {bad}" if bad else "")
        text += f"\n\n{actions(rows)}"
        (out / "report.md").write_text(text + "\n")
        segments = partition_segments(rows)
        plot_partitions(segments, ncpus, out / "partitions.png")
        plot_utilization(segments, ncpus, out / "utilization.png")
        console.print(escape(text))
        if bad:
            console.print(f"[red]jobs without a verified result: {bad}[/]")
    tables = [comparison_table(summaries)]
    names = list(records)
    rels = [relative_performance(records[names[0]], records[n], label_a=names[0], label_b=n) for n in names[1:]]
    for rel in rels:
        tables += relative_tables(rel)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "comparison.md").write_text(markdown(tables) + "\n")
    plot_response_by_class(summaries, args.out / "response_by_class.png")
    if rels:
        plot_relative_cdf(rels, args.out / "relative_cdf.png")
    console.print(escape(markdown(tables[:1])))
    console.print(f"results in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
