"""Batch use as people know it from Slurm (issue 13), with the real daemons and real MPI jobs on 2 CPUs:
folding a job bigger than the node under every policy, pending reasons, job scripts, --wait,
dependencies, begin times, queue and accounting filters, SWF export, and bad input."""

from __future__ import annotations

import contextlib
import io
import json
import pwd
import re
import subprocess
import time

import pytest

from tests.conftest import wait_for
from tests.launcher_harness import Node, expiring_backfill, send_app, vmapp_result
from tests.test_launcher import as_user
from vmsched.launcher.cli import submit_main
from vmsched.launcher.policy.config import POLICIES
from vmsched.protocol import Client


def set_policy(node: Node, spec: str) -> None:
    with Client(node.cfg.launcher_socket) as c:
        c.call("set_policy", policy=spec)


def test_a_4_rank_short_job_on_2_cpus_starts_folded_under_every_policy(node_factory):
    node = node_factory("fjt+easy:malleable")
    # The two submissions on the default policy: both used to be refused.
    for policy in [*(p + "+easy:malleable" for p in POLICIES), "fcfs", "fjt"]:
        set_policy(node, policy)
        # Short (2 iterations): what is checked is how each policy starts it, ten times over.
        job = node.submit("-n", "4", "--max-mpl", "4", "--time", "1m", "--", *send_app(2))
        acct = node.wait_all_done(timeout=120)[job]
        assert acct["state"] == "completed" and acct["exit_code"] == 0, (policy, acct)
        assert acct["nranks"] == 4 and acct["mpl_history"] == "2", (policy, acct)
        [start] = [e for e in node.job(job)["events"] if e["kind"] == "start"]
        assert start["max_mpl"] == 2 and "folded to fit this node's 2 CPUs" in start["why"], (policy, start)
        assert vmapp_result(node.output(job))["verified"] is True
    set_policy(node, "fjt+easy:malleable")
    job = node.submit("-n", "4", "--", *send_app(2))  # no class, no time: the default (long) class
    assert node.wait_all_done(timeout=120)[job]["state"] == "completed"
    assert vmapp_result(node.output(job))["verified"] is True
    # Refused only when no allowed folding fits, saying why.
    r = node.cli("vmsubmit", "-n", "4", "--max-mpl", "1", "--", "true", check=False)
    assert r.returncode == 1 and "no allowed folding fits" in r.stderr, r.stderr
    r = node.cli("vmsubmit", "-n", "12", "--", "true", check=False)
    assert r.returncode == 1 and "no allowed folding fits" in r.stderr and "policy's limit" in r.stderr, r.stderr
    assert json.loads(node.cli("vmq", "--json").stdout)["jobs"] == []


def reason(node: Node, job: int) -> str | None:
    return node.job(job)["job"]["pending_reason"]


def wait_reason(node: Node, job: int, expected: str, timeout: float = 30) -> None:
    wait_for(lambda: reason(node, job) == expected, timeout=timeout, interval=0.1,
             what=f"job {job} to wait for reason {expected} (has {reason(node, job)})")  # fmt: skip


def test_pending_reasons_resources_reservation_priority_dependency_begintime(node_factory):
    node = node_factory("fcfs+easy:none/fifo")
    a = node.submit("-n", "1", "--time", "30s", "--", *send_app(3000))  # holds one CPU; cancelled below
    node.wait_state(a, ("running",))
    head = node.submit("-n", "2", "--time", "30s", "--", *send_app(5))  # needs both CPUs
    behind = node.submit("-n", "1", "--time", "10m", "--", *send_app(5))  # fits, but would delay the head
    big = node.submit("-n", "2", "--time", "5s", "--", *send_app(5))  # fits in no free CPU
    dep = node.submit("-n", "1", "--time", "5s", "-d", f"afterok:{head}", "--", *send_app(5))
    later = node.submit("-n", "1", "--time", "5s", "--begin", "+1h", "--", *send_app(5))
    expected = {head: "Resources", behind: "Reservation", big: "Priority", dep: "Dependency", later: "BeginTime"}
    for job, why in expected.items():
        wait_reason(node, job, why)
    assert reason(node, a) is None
    shown = {j["id"]: j["pending_reason"] for j in node.queue()["jobs"]}
    assert {j: shown[j] for j in expected} == expected
    # The same in the table, 80 columns wide, nothing cut off.
    table = at_width(node, "vmq", "80")
    assert all(len(line) <= 80 for line in table.splitlines()), table
    for why in expected.values():
        assert why in table, table
    # Filters and columns.
    only = node.cli("vmq", "-t", "queued", "-u", "root", "--format", "id,reason").stdout
    rows = [line.split() for line in only.splitlines()[2:] if line.strip()]
    assert {int(r[0]): r[1] for r in rows} == expected, only
    assert json.loads(node.cli("vmq", "--json", "-u", "nobody").stdout)["jobs"] == []
    assert [j["id"] for j in json.loads(node.cli("vmq", "--json", "-t", "running").stdout)["jobs"]] == [a]
    for bad in (("-t", "sleeping"), ("--format", "id,colour")):
        r = node.cli("vmq", *bad, check=False)
        assert r.returncode == 2 and "choose from" in r.stderr, r.stderr
    with Client(node.cfg.launcher_socket) as c:  # a held queue says so
        c.call("pause", paused=True)
        wait_reason(node, head, "Paused")
        c.call("pause", paused=False)
    node.cli("vmcancel", *map(str, (a, head, behind, big, dep, later)))
    node.wait_all_done()


def at_width(node: Node, prog: str, columns: str) -> str:
    """`prog`'s table, piped, for a terminal `columns` wide."""
    r = subprocess.run([str(node.bin / prog)], env={**node.env, "COLUMNS": columns}, cwd=node.work,
                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return r.stdout


def test_suspended_and_requeued_reasons(node_factory):
    # The head runs 20 iterations (2 s or more), the time in which the late job's reason is read.
    node = node_factory("fcfs+easy:suspend/fifo")
    a, head, late = expiring_backfill(node, head_iters=20)
    wait_for(lambda: node.job(late)["job"]["suspended"], timeout=60, interval=0.1, what="the late job suspended")
    wait_reason(node, late, "Suspended")
    acct = node.wait_all_done(timeout=240)
    assert acct[late]["state"] == "completed" and vmapp_result(node.output(late))["verified"]

    set_policy(node, "fcfs+easy:abort")
    a, head, late = expiring_backfill(node, head_iters=20)
    wait_for(lambda: node.job(late)["job"]["requeues"] >= 1, timeout=60, interval=0.1, what="the late job requeued")
    wait_reason(node, late, "Requeued (window expired)")
    acct = node.wait_all_done(timeout=240)
    for j in (a, head, late):
        assert acct[j]["state"] == "completed" and vmapp_result(node.output(j))["verified"]


def test_afterok_afterany_never_satisfied_and_wait(node_factory):
    node = node_factory("fcfs/fifo")
    first = node.submit("-n", "1", "--time", "30s", "--", *send_app(30))
    after = node.submit("-n", "1", "--time", "30s", "-d", f"afterok:{first}", "--", *send_app(5))
    failing = node.submit("-n", "1", "--time", "30s", "--", "sh", "-c", "exit 3")
    never = node.submit("-n", "1", "--time", "30s", "-d", f"afterok:{first}:{failing}", "--", *send_app(5))
    anyway = node.submit("-n", "1", "--time", "30s", "-d", f"afterany:{failing}", "--", *send_app(5))
    node.wait_state(failing, ("failed",))
    wait_reason(node, never, "DependencyNeverSatisfied")
    node.cli("vmcancel", str(never))  # a job that can never start is cancelled like any other
    acct = node.wait_all_done()
    assert acct[never]["state"] == "cancelled" and acct[never]["start_time"] is None
    assert acct[failing]["state"] == "failed" and acct[failing]["exit_code"] == 3
    assert acct[after]["start_time"] >= acct[first]["end_time"]
    assert acct[anyway]["start_time"] >= acct[failing]["end_time"]
    for j in (first, after, anyway):
        assert acct[j]["state"] == "completed" and vmapp_result(node.output(j))["verified"]
    # --wait: the job's exit code becomes vmsubmit's.
    r = node.cli("vmsubmit", "-W", "-n", "1", "--time", "30s", "--", "sh", "-c", "exit 3", check=False)
    assert r.returncode == 3, (r.stdout, r.stderr)
    r = node.cli("vmsubmit", "--wait", "-n", "2", "--time", "30s", "--", *send_app(5), check=False)
    assert r.returncode == 0 and "completed" in r.stdout, (r.stdout, r.stderr)
    job = int(r.stdout.split()[2])
    assert vmapp_result(node.output(job))["verified"]


def as_nobody(fn) -> dict:
    nobody = pwd.getpwnam("nobody")
    return as_user(nobody.pw_uid, nobody.pw_gid, fn)


def cli_in_process(main, argv: list[str]) -> dict:
    """Run a CLI entry point in this (forked, other user's) process: this machine's Python may not be
    executable by other users."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(argv)
    return {"rc": rc, "err": err.getvalue(), "out": out.getvalue()}


JOB_SCRIPT = """#!/bin/sh
#VMSCHED -n 2 --time 1m
#VMSCHED -J from-script --class short   # the command line's -J wins
#VMSCHED --export NONE,GREETING=hello
echo "greeting=$GREETING secret=${SECRET:-unset} args=$*"
exec python -m vmsched.apps.send --class S --iters 5
"""


def test_job_script_directives_are_honoured_and_the_command_line_wins(node_factory):
    node = node_factory("fcfs/fifo")
    (node.work / "job.sh").write_text(JOB_SCRIPT)
    sub = node.work / "sub"
    sub.mkdir()
    env = {**node.env, "SECRET": "s3cret"}

    def submit(*argv: str) -> int:
        r = subprocess.run([str(node.bin / "vmsubmit"), "--json", *argv], env=env, cwd=node.work, capture_output=True,
                           text=True, timeout=60, check=True)  # fmt: skip
        return json.loads(r.stdout)["job"]

    scripted = submit("-J", "from-cli", "-D", "sub", "job.sh", "one", "two")
    (node.work / "plain.sh").write_text("#VMSCHED -n 1\nexec true\n")  # no #! line: /bin/sh; named after it
    unnamed = submit("plain.sh")
    one_rank = submit("-n", "1", "--export", "ALL", "job.sh")
    acct = node.wait_all_done()
    job = node.job(scripted)["job"]
    assert (job["name"], job["nranks"], job["time_limit"], job["job_class"]) == ("from-cli", 2, 60.0, "short")
    assert job["cwd"] == str(sub)
    out = (sub / f"vmsched-{scripted}.out").read_text()  # -D: the job ran there
    assert out.count("greeting=hello secret=unset args=one two") == 2, out  # each rank; --export NONE,...
    assert vmapp_result(out)["verified"] is True
    other = node.job(one_rank)["job"]
    assert (other["name"], other["nranks"]) == ("from-script", 1)
    plain = node.job(unnamed)["job"]
    assert plain["name"] == "plain.sh" and plain["state"] == "completed"
    assert "greeting= secret=s3cret" in node.output(one_rank)  # the command line's --export ALL replaces it
    assert vmapp_result(node.output(one_rank))["verified"] is True
    assert acct[scripted]["state"] == acct[one_rank]["state"] == "completed"


def test_bad_batch_input_is_refused_and_stores_nothing(node_factory):
    node = node_factory("fcfs/fifo")
    keep = node.submit("-n", "1", "--time", "60s", "--", *send_app(3000))  # outlives the checks; cancelled
    node.wait_state(keep, ("running",))  # started first: a start during the checks is no change of theirs
    before = node.stored_jobs()
    scripts = {
        "missing-arg.sh": ("#VMSCHED -n\ntrue\n", "line 1: argument -n/--ntasks: expected one argument"),
        "glued.sh": ("#!/bin/sh\n#VMSCHED--time 1m\n", "line 2: malformed directive"),
        "unknown.sh": ("#VMSCHED -n 1 --frobnicate\n", "unrecognized arguments: --frobnicate"),
        "quote.sh": ("#VMSCHED -n 1 -J 'open\n", "No closing quotation"),
        "time.sh": ("#VMSCHED -n 1 --time soon\ntrue\n", "bad duration 'soon'"),
    }
    for name, (text, _) in scripts.items():
        (node.work / name).write_text(text)
    usage = {("vmsubmit", name): needle for name, (_, needle) in scripts.items()}
    usage |= {
        ("vmsubmit", "nope.sh"): "job script nope.sh does not exist",
        ("vmsubmit", "-n", "1", "--export", "1BAD=x", "--", "true"): "not a variable name",
        ("vmsubmit", "-n", "1", "-D", "/nonexistent", "--", "true"): "no such directory",
        ("vmsubmit", "-n", "1", "-d", "afterwards:3", "--", "true"): "bad dependency",
        ("vmsubmit", "-n", "1", "--begin", "someday", "--", "true"): "bad begin time",
    }
    for argv, needle in usage.items():
        r = node.cli(*argv, check=False)
        assert r.returncode == 2 and needle in r.stderr, (argv, r.returncode, r.stderr)
    refused = {
        ("-d", "afterok:424242"): "dependency on unknown job 424242",
        ("-d", f"afterok:{keep}:{keep + 1}"): f"dependency cycle: job {keep + 1}",
        ("--begin", "2020-01-01T00:00"): "the begin time is in the past",
    }
    for args, needle in refused.items():
        r = node.cli("vmsubmit", "-n", "1", *args, "--", "true", check=False)
        assert r.returncode == 1 and needle in r.stderr, (args, r.returncode, r.stderr)
    # Another user: cannot read root's private script, cannot depend on root's job.
    secret = node.work / "secret.sh"
    secret.write_text("#VMSCHED -n 1\ntrue\n")
    secret.chmod(0o600)
    seen = as_nobody(lambda: {
        "script": cli_in_process(submit_main, ["--state-dir", str(node.state), str(secret)]),
        "dep": cli_in_process(submit_main, ["--state-dir", str(node.state), "-n", "1", "-d", f"afterok:{keep}",
                                            "--", "true"]),
    })  # fmt: skip
    assert seen["script"]["rc"] == 2 and "is not readable by you" in seen["script"]["err"], seen
    assert seen["dep"]["rc"] == 1 and f"dependency on job {keep}, which belongs to root" in seen["dep"]["err"], seen
    assert node.stored_jobs() == before
    node.cli("vmcancel", str(keep))
    node.wait_all_done()
    assert node.submit("-n", "1", "--", "true") == keep + 1, "a refused submission took a job id"
    node.wait_all_done()


def test_vmacct_filters_parsable_and_an_swf_history_that_replays(node_factory, tmp_path):
    from vmsched.protocol import ProtocolError
    from vmsched.workloads.metrics import records_from_swf
    from vmsched.workloads.swf import machine_size, read_swf

    node = node_factory("fcfs/fifo")
    t0 = time.time()
    good = node.submit("-n", "2", "--time", "30s", "-J", "good", "--", *send_app(5))
    bad = node.submit("-n", "1", "--time", "30s", "-J", "bad", "--", "sh", "-c", "exit 2")

    def theirs() -> dict:
        with Client(node.cfg.launcher_socket) as c:
            job = c.call("submit", command=["true"], procs=[1], cwd=str(node.work), env={"PATH": "/usr/bin:/bin"},
                         time_limit=30)["job"]  # fmt: skip
            try:
                c.call("acct", user="root")
                peek = "allowed"
            except ProtocolError as e:
                peek = str(e)
        return {"job": job, "peek": peek}

    seen = as_nobody(theirs)
    assert "only root may see the jobs of root" in seen["peek"], seen
    node.wait_all_done()

    def ids(*argv: str) -> list[int]:
        return [r["id"] for r in json.loads(node.cli("vmacct", "--json", *argv).stdout)]

    assert ids("-u", "nobody") == [seen["job"]]
    assert ids("-u", "root") == [good, bad]
    assert ids("-S", "+1h") == [] and ids("-E", str(t0 - 3600)) == []
    assert ids("-S", str(t0 - 1), "-E", "now") == [good, bad, seen["job"]]
    lines = node.cli("vmacct", "-p", "--format", "id,user,state,exit,name", "-u", "root").stdout.splitlines()
    assert lines == ["ID|USER|STATE|EXIT|NAME", f"{good}|root|completed|0|good", f"{bad}|root|failed|2|bad"]
    table = at_width(node, "vmacct", "80")
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert "completed" in table and "failed" in table and "…" not in table, table
    for prog in ("vmacct", "vmq"):  # a mistyped name is an error, not an empty list
        r = node.cli(prog, "-u", "zzz-no-such-user", check=False)
        assert r.returncode == 2 and "unknown user(s) zzz-no-such-user" in r.stderr, r.stderr
    # The node's history as SWF: read back by the SWF reader, replayed by the simulator.
    swf = tmp_path / "history.swf"
    assert "wrote 3 jobs" in node.cli("vmacct", "--swf", str(swf)).stdout
    log = read_swf(swf)
    records = {r.id: r for r in records_from_swf(log)}
    assert sorted(records) == sorted([good, bad, seen["job"]]) and machine_size(log) == 2
    assert records[good].procs_used == 2 and {j.job_number: j.status for j in log.jobs}[bad] == 0
    out = tmp_path / "sim"
    r = subprocess.run([str(node.bin / "vmsim"), str(swf), "--policy", "fcfs+easy:abort", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    [result] = out.glob("*/result.swf")
    replayed = records_from_swf(read_swf(result))
    assert sorted(r.id for r in replayed) == sorted(records)
    # Its report gives the run's energy by the launcher's power model (defaults P_idle 20 W, P_max 60 W).
    makespan = max(r.end for r in replayed) - min(r.submit for r in replayed)
    kj = (20.0 * makespan + 40.0 / 2 * sum(r.cpu_time for r in replayed)) / 1000
    report = (result.parent / "report.md").read_text()
    shown = re.search(r"energy \(kJ\)\s*\|\s*([\d.,]+)", report)
    assert shown and float(shown[1].replace(",", "")) == pytest.approx(kj, rel=0.01, abs=0.01), (kj, report[:800])
    assert "energy kJ" in (out / "comparison.md").read_text()
