"""The launcher for real: both daemons, the user CLI, real MPI jobs under the runtime, real SQLite."""

from __future__ import annotations

import json
import os
import pwd
import resource
import signal
import socket
import subprocess
import sys
import time

from tests.conftest import BIN, wait_for
from tests.launcher_harness import Node, send_app, send_for, starts, vmapp_result


def partition_sizes(node: Node, job: int) -> list[int]:
    """The job's partition sizes over time, consecutive repeats removed."""
    sizes: list[int] = []
    for e in node.job(job)["events"]:
        if e["kind"] == "partition" and (not sizes or sizes[-1] != len(e["cpus"])):
            sizes.append(len(e["cpus"]))
    return sizes


def test_fcfs_order_results_and_accounting(node_factory):
    node = node_factory("fcfs/fifo")
    a = node.submit("-n", "2", "--time", "60s", "--", *send_app(15))
    b = node.submit("-n", "2", "--time", "60s", "--", *send_app(15))
    c = node.submit("-n", "1", "--time", "60s", "-J", "third", "--", *send_app(10))
    shown = node.cli("vmq").stdout
    assert "policy fcfs/fifo" in shown and "third" in shown
    assert f"job {a}" in node.cli("vmq", "-j", str(a)).stdout
    acct = node.wait_all_done()
    for j in (a, b, c):
        assert acct[j]["state"] == "completed" and acct[j]["exit_code"] == 0, acct[j]
        res = vmapp_result(node.output(j))
        assert res["verified"] is True
    assert vmapp_result(node.output(a))["checksum"] == vmapp_result(node.output(b))["checksum"]
    # Rigid FCFS without backfilling: each job needs the CPUs the one before holds.
    assert acct[b]["start_time"] >= acct[a]["end_time"] - 0.5
    assert acct[c]["start_time"] >= acct[b]["start_time"]
    assert acct[c]["name"] == "third"
    assert acct[a]["wait"] < acct[b]["wait"]
    assert acct[a]["nranks"] == 2 and acct[a]["mpl_history"] == "1"
    assert acct[a]["cpu_seconds"] > 0
    # The human table shows the same jobs.
    table = node.cli("vmacct").stdout
    assert "third" in table and "completed" in table


def test_fjt_folds_long_jobs_and_shrinks_them_for_short_ones(node_factory):
    node = node_factory("fjt/fifo")
    short1 = node.submit("-n", "1", "--class", "short", "--time", "60s", "--", *send_app(40))
    node.wait_state(short1, ("running",))
    # Only a short job runs: the long job starts folded (max MPL 4) on the one free CPU ...
    # Long enough to outlast short2 and expand again after it (160 iterations ended first once, 2026-11-28).
    long = node.submit("-n", "2", "--class", "long", "--time", "10m", "--", *send_app(400))
    started = node.wait_state(long, ("running",))
    assert started["cur_max_mpl"] == 4
    wait_for(lambda: partition_sizes(node, long)[:1] == [1], interval=0.05, what="the long job on one CPU")
    # ... and expands to both CPUs when the short job ends.
    node.wait_state(short1, ("completed",))
    wait_for(lambda: partition_sizes(node, long)[-1:] == [2], timeout=30, interval=0.05, what="the long job to expand")
    # A short job arriving while the long job runs expanded makes it shrink.
    short2 = node.submit("-n", "1", "--class", "short", "--time", "60s", "--", *send_app(20))
    node.wait_state(short2, ("running", "completed"))
    wait_for(lambda: partition_sizes(node, long)[-2:] == [2, 1] or partition_sizes(node, long)[-3:] == [2, 1, 2],
             timeout=30, interval=0.05, what="the long job to shrink for the short one")  # fmt: skip
    acct = node.wait_all_done(timeout=180)
    assert partition_sizes(node, long) == [1, 2, 1, 2]
    assert acct[short2]["mpl_history"] == "1"
    for j in (short1, long, short2):
        assert acct[j]["state"] == "completed", acct[j]
        assert vmapp_result(node.output(j))["verified"]


def test_easy_backfills_without_delaying_the_head(node_factory):
    node = node_factory("fcfs+easy:none/fifo")
    a = node.submit("-n", "1", "--time", "8s", "--", *send_for(4))  # within its estimate on any node
    node.wait_state(a, ("running",))
    head = node.submit("-n", "2", "--time", "30s", "--", *send_app(10))  # needs both CPUs: waits for a
    small = node.submit("-n", "1", "--time", "2s", "--", *send_app(5))  # ends before a's estimate: backfills
    big = node.submit("-n", "1", "--time", "60s", "--", *send_app(5))  # would delay the head: must wait
    acct = node.wait_all_done(timeout=180)
    st = starts(acct)
    assert st[small] < st[head], "the small job should have been backfilled"
    assert st[big] >= st[head], "a job that would delay the head's reservation jumped ahead"
    # The head started as soon as a's CPUs were free, not later.
    assert st[head] <= acct[a]["end_time"] + 1.0
    assert any(e["kind"] == "start" and e["backfilled"] for e in node.job(small)["events"])
    for j in (a, head, small, big):
        assert acct[j]["state"] == "completed" and vmapp_result(node.output(j))["verified"]


def test_expired_window_abort_requeues_and_the_job_finishes(node_factory):
    node = node_factory("fcfs+easy:abort/fifo")
    a = node.submit("-n", "1", "--time", "10s", "--", *send_for(4))  # within its estimate on any node
    node.wait_state(a, ("running",))
    head = node.submit("-n", "2", "--time", "30s", "--", *send_app(10))
    # Its estimate (1 s) is far too short: its window expires while the head still waits.
    late = node.submit("-n", "1", "--time", "1s", "--", *send_for(3))
    acct = node.wait_all_done(timeout=240)
    kinds = [e["kind"] for e in node.job(late)["events"]]
    assert "abort" in kinds and "requeue" in kinds, kinds
    assert acct[late]["requeues"] >= 1
    assert acct[late]["state"] == "completed"
    assert vmapp_result(node.output(late))["verified"]
    assert acct[head]["start_time"] <= acct[late]["start_time"], "the requeued job must not jump the head again"


def test_restart_loses_nothing_and_starts_nothing_twice(node_factory):
    node = node_factory("fcfs/fifo")
    running = node.submit("-n", "2", "--time", "60s", "--", *send_for(6))  # outlives the restart
    node.wait_state(running, ("running",))
    queued = [node.submit("-n", "2", "--time", "60s", "--", *send_app(5)) for _ in range(2)]
    node.launcher.send_signal(signal.SIGKILL)
    node.launcher.wait()
    time.sleep(0.5)  # the running job goes on without a launcher
    node.start_launcher()
    q = {j["id"]: j["state"] for j in node.queue()["jobs"]}
    assert q.get(running) == "running", node.job(running)
    assert all(q[j] in ("queued", "running") for j in queued)
    acct = node.wait_all_done(timeout=180)
    for j in (running, *queued):
        assert acct[j]["state"] == "completed", acct[j]
        starts_logged = [e for e in node.job(j)["events"] if e["kind"] == "start"]
        assert len(starts_logged) == 1, f"job {j} started {len(starts_logged)} times"
        assert node.output(j).count("VMAPP ") == 1
    # Killed again while a job runs, and that job ends while no launcher runs: it is accounted.
    last = node.submit("-n", "1", "--time", "60s", "--", *send_app(5))
    node.wait_state(last, ("running",))
    node.launcher.send_signal(signal.SIGKILL)
    node.launcher.wait()
    wait_for(lambda: (node.cfg.jobs_dir / str(last) / "status.json").exists(), timeout=60, what="job to end")
    node.start_launcher()
    assert node.wait_all_done()[last]["state"] == "completed"


def test_bad_input_is_refused_and_changes_nothing(node_factory):
    node = node_factory("fcfs/fifo")
    # One rank: the CLI runs below (16 Python start-ups) have the other CPU to themselves.
    keep = node.submit("-n", "1", "--time", "60s", "--", *send_app(3000))  # outlives the checks; cancelled
    node.wait_state(keep, ("running",))  # started: its stored record changes no more while it runs
    before = node.stored_jobs()
    usage = [
        ("vmsubmit", "-n", "2"),  # no command
        ("vmsubmit", "--", "true"),  # no size
        ("vmsubmit", "-n", "0", "--", "true"),
        ("vmsubmit", "-n", "2", "--max-mpl", "0", "--", "true"),
        ("vmsubmit", "-n", "2", "--time", "soon", "--", "true"),
        ("vmsubmit", "--procs", "8-4", "--", "true"),
        ("vmsubmit", "-n", "2", "--frobnicate", "--", "true"),
        ("vmsubmit", "-n", "2", "--deadline", "yesterday", "--", "true"),
        ("vmq", "--bogus"),
        ("vmcancel",),
        ("vmacct", "--limit", "0"),
    ]
    for argv in usage:
        r = node.cli(*argv, check=False)
        assert r.returncode == 2 and r.stderr.strip(), (argv, r.returncode, r.stderr)
    refused = {
        ("vmsubmit", "-n", "9999", "--", "true"): "more than the 256",
        ("vmsubmit", "-n", "4", "--max-mpl", "1", "--", "true"): "need 4 CPUs; this node has 2",
        ("vmsubmit", "-n", "2", "--deadline", "1000", "--", "true"): "deadline is in the past",
        ("vmcancel", "424242"): "unknown job 424242",
        ("vmq", "-j", "424242"): "unknown job 424242",
    }
    for argv, needle in refused.items():
        r = node.cli(*argv, check=False)
        assert r.returncode == 1 and needle in r.stderr, (argv, r.returncode, r.stderr)
    # Garbage on the socket: the launcher neither dies nor wedges.
    for _ in range(5):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.connect(str(node.cfg.launcher_socket))
            u.sendall(os.urandom(2048))
    from vmsched.protocol import Client

    with Client(node.cfg.launcher_socket) as c:
        assert c.request_raw(b"{nope")["ok"] is False
        assert "unknown op" in c.request_raw(b'{"op": "format_disk"}')["error"]
        assert "must be a non-empty list" in c.request_raw(b'{"op": "submit", "command": "rm"}')["error"]
    assert node.stored_jobs() == before
    node.cli("vmcancel", str(keep))
    r = node.cli("vmcancel", str(keep), check=False)
    assert r.returncode == 1 and "already ended" in r.stderr
    assert node.wait_all_done()[keep]["state"] == "cancelled"
    # No launcher: exit code 3 and a clear message.
    node.launcher.send_signal(signal.SIGTERM)
    node.launcher.wait()
    r = node.cli("vmq", check=False)
    assert r.returncode == 3 and "is the launcher running" in r.stderr


def as_user(uid: int, gid: int, fn) -> dict:
    """Run `fn` in a forked child that has become `uid`: a second local user talking to the launcher.
    (Forked, not exec'd: this machine's Python may not be executable by other users.)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.setgid(gid)
            os.setuid(uid)
            result = fn()
        except Exception as e:  # noqa: BLE001 - reported to the parent
            result = {"exception": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def nice_limit_a_launcher_gives() -> str:
    """The soft RLIMIT_NICE (what the runtime reads) that a root launcher started here gives its jobs: 20,
    or more if it has more; where it may not raise its hard limit to 20, its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= 20:
        return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    raise_it = "import resource; resource.setrlimit(resource.RLIMIT_NICE, (20, 20))"
    if hard == resource.RLIM_INFINITY or hard >= 20 or subprocess.run([sys.executable, "-c", raise_it]).returncode == 0:
        return "20"
    return str(hard)


WHO_AND_NICE_LIMIT = ["sh", "-c", "id -u; grep '^Max nice priority' /proc/self/limits"]


def test_users_cannot_touch_each_others_jobs(node_factory):
    from vmsched.protocol import Client, ProtocolError

    nobody = pwd.getpwnam("nobody")
    node = node_factory("fcfs/fifo")
    mine = node.submit("-n", "2", "--time", "60s", "-J", "secret-name", "--", *send_app(200))

    def their_session() -> dict:
        out: dict = {}
        with Client(node.cfg.launcher_socket) as c:
            out["submitted"] = c.call("submit", command=WHO_AND_NICE_LIMIT, procs=[1], cwd=str(node.work),
                                      env={"PATH": "/usr/bin:/bin"}, time_limit=60)["job"]  # fmt: skip
            for op in ("cancel", "job"):
                try:
                    c.call(op, job=mine)
                    out[op] = "allowed"
                except ProtocolError as e:
                    out[op] = str(e)
            out["queue"] = c.call("queue")["jobs"]
        return out

    seen = as_user(nobody.pw_uid, nobody.pw_gid, their_session)
    assert "exception" not in seen, seen
    assert "belongs to root" in seen["cancel"] and "belongs to root" in seen["job"]
    listed = {j["id"]: j for j in seen["queue"]}
    assert listed[mine]["name"] is None and listed[mine]["command"] is None  # listed, but no details
    assert listed[seen["submitted"]]["command"] == WHO_AND_NICE_LIMIT
    assert listed[mine]["user"] == "root" and listed[seen["submitted"]]["user"] == "nobody"
    theirs = seen["submitted"]
    node.cli("vmcancel", str(mine))  # root may cancel anyone's job; here its own
    acct = node.wait_all_done()
    assert acct[mine]["state"] == "cancelled"
    assert acct[theirs]["state"] == "completed" and acct[theirs]["user"] == "nobody"
    out = node.work / f"vmsched-{theirs}.out"
    assert out.stat().st_uid == nobody.pw_uid, "the output file must be created by the job's user"
    uid, limits = out.read_text().splitlines()
    assert uid == str(nobody.pw_uid), "the job must run as the user who submitted it"
    # Its ranks may raise their priority back to nice 0 after borrowing a CPU at a lower one, and no
    # further: RLIMIT_NICE 20, where the launcher may raise it (this container's root lacks
    # CAP_SYS_RESOURCE, and there the job keeps the launcher's limit; systemd sets it: LimitNICE=+0).
    assert limits.split()[3] == nice_limit_a_launcher_gives(), limits


def test_cancel_leaves_no_process_and_no_shared_memory(node_factory):
    import psutil

    node = node_factory("fcfs/fifo")
    job = node.submit("-n", "2", "--time", "60s", "--", *send_app(400))
    info = node.wait_state(job, ("running",))
    shim = psutil.Process(info["shim_pid"])
    wait_for(lambda: len(shim.children(recursive=True)) >= 4, what="mpiexec, proxy and two ranks")
    time.sleep(1)  # the shim notes the mappings every 0.1 s during the first seconds
    procs = shim.children(recursive=True)
    mapped = {m.path for p in procs for m in p.memory_maps() if m.path.startswith("/dev/shm/mpich_shm")}
    assert mapped, "expected MPICH's intranode segment to be mapped by the ranks"
    node.cli("vmcancel", str(job))
    assert node.wait_state(job, ("cancelled",))["exit_code"] != 0
    gone, alive = psutil.wait_procs(procs, timeout=10)
    assert not alive, f"left behind: {alive}"
    leaked = {p for p in mapped if os.path.exists(p)}
    assert not leaked, f"the cancelled job left shared memory behind: {leaked}"


def test_failing_requests_and_passes_are_logged_and_the_launcher_goes_on():
    """Test-only fault injection (vmsched/faults.py): the 'job' handler and scheduling passes 1-3
    raise. Each failing request gets an error reply, each failure is logged with its traceback, the
    passes are retried, and the job still starts and completes with a verified result."""
    env = {**os.environ, "VMSCHED_LAUNCHER_FAULTS": "handler=job;pass=1,2,3"}
    node = Node("fcfs", base_env=env)
    try:
        node.start()
        job = node.submit("-n", "2", "--time", "30s", "--", *send_app(5))
        r = node.cli("vmq", "-j", str(job), "--json", check=False)
        assert r.returncode != 0 and "internal error in 'job'" in r.stderr and "injected fault" in r.stderr
        done = wait_for(lambda: (a := node.acct()).get(job, {}).get("state") == "completed" and a, timeout=120,
                        interval=0.3, what="the job to complete despite the failing passes")  # fmt: skip
        assert vmapp_result(node.output(job))["verified"] and done[job]["nranks"] == 2
        log = node.cfg.launcher_log.read_text()
        for needle in ("request 'job' failed", "scheduling pass failed", "InjectedFault: injected fault in "
                       "scheduling pass 3", "Traceback"):  # fmt: skip
            assert needle in log, needle
        assert "scheduling pass 4" not in log and node.launcher.poll() is None
    finally:
        node.stop()


def test_launcher_fault_injection_refuses_nonsense(tmp_path):
    env = {**os.environ, "VMSCHED_LAUNCHER_FAULTS": "quantum=3"}
    r = subprocess.run([str(BIN / "vm-launcher"), "--state-dir", str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=30)  # fmt: skip
    assert r.returncode == 2 and "VMSCHED_LAUNCHER_FAULTS: cannot parse 'quantum=3'" in r.stderr
