"""The other policies with real daemons and real MPI jobs: the decision each must make on 2 CPUs.
(fcfs, fjt, EASY and the abort expiry are in test_launcher.py.)"""

from __future__ import annotations

import time

from tests.launcher_harness import Node, expiring_backfill, send_app, send_for, starts, vmapp_result
from vmsched.protocol import Client


def events(node: Node, job: int, kind: str) -> list[dict]:
    return [e for e in node.job(job)["events"] if e["kind"] == kind]


def all_verified(node: Node, acct: dict[int, dict], jobs) -> None:
    for j in jobs:
        assert acct[j]["state"] == "completed", acct[j]
        assert vmapp_result(node.output(j))["verified"]


def test_moldable_starts_with_a_percentage_of_the_request(node_factory):
    node = node_factory("moldable/fifo")
    a = node.submit("-n", "1", "--time", "30s", "--", *send_for(3))  # b is decided meanwhile
    node.wait_state(a, ("running",))
    b = node.submit("--procs", "2,1", "--time", "30s", "--", *send_app(10))  # 2 do not fit: 80 % -> 1
    acct = node.wait_all_done()
    assert acct[b]["nranks"] == 1
    assert acct[b]["start_time"] < acct[a]["end_time"], "the moldable job should not have waited for 2 CPUs"
    all_verified(node, acct, (a, b))


def test_asp_max_gives_at_most_60_percent_of_the_machine(node_factory):
    node = node_factory("asp-max/fifo")
    a = node.submit("--procs", "2,1", "--time", "30s", "--", *send_for(3))  # b starts meanwhile
    b = node.submit("--procs", "2,1", "--time", "30s", "--", *send_for(3))
    acct = node.wait_all_done()
    # MAX = 60 % of 2 CPUs: one CPU each, so both run side by side (work-conserving).
    assert acct[a]["nranks"] == 1 and acct[b]["nranks"] == 1
    assert acct[b]["start_time"] < acct[a]["end_time"]
    all_verified(node, acct, (a, b))


def test_psa_equipartitions_over_the_queue(node_factory):
    node = node_factory("psa/fifo")
    with Client(node.cfg.launcher_socket) as c:
        c.call("pause", paused=True)  # let the queue fill, then schedule it at once
        jobs = [node.submit("--procs", "2,1", "--time", "30s", "--", *send_app(15)) for _ in range(2)]
        alone_later = node.submit("--procs", "2,1", "--time", "30s", "--", *send_app(5))
        c.call("pause", paused=False)
    acct = node.wait_all_done()
    # Three queued on 2 CPUs: a share of 2 // 3 -> the smallest allowed count, 1 rank each.
    assert [acct[j]["nranks"] for j in jobs] == [1, 1]
    assert acct[alone_later]["nranks"] in (1, 2)
    all_verified(node, acct, (*jobs, alone_later))


def test_folding_halves_the_latest_job_for_the_head(node_factory):
    node = node_factory("folding/fifo")
    a = node.submit("-n", "2", "--time", "60s", "--", *send_for(5))  # past b's start beside it
    node.wait_state(a, ("running",))
    b = node.submit("-n", "1", "--time", "30s", "--", *send_app(10))
    acct = node.wait_all_done(timeout=180)
    folds = events(node, a, "set_mpl")
    assert folds and folds[0]["max_mpl"] == 2, node.job(a)["events"]
    assert acct[b]["start_time"] < acct[a]["end_time"], "b should have run beside the folded a"
    sizes = [len(e["cpus"]) for e in events(node, a, "partition")]
    assert sizes[0] == 2 and 1 in sizes
    all_verified(node, acct, (a, b))


def test_conservative_backfill_keeps_every_reservation(node_factory):
    node = node_factory("fcfs+conservative:none/fifo")
    a = node.submit("-n", "1", "--time", "8s", "--", *send_for(4))  # the others are decided meanwhile
    node.wait_state(a, ("running",))
    head = node.submit("-n", "2", "--time", "30s", "--", *send_app(10))
    second = node.submit("-n", "1", "--time", "30s", "--", *send_app(5))
    small = node.submit("-n", "1", "--time", "2s", "--", *send_app(5))
    acct = node.wait_all_done(timeout=180)
    st = starts(acct)
    assert st[small] < st[head], "the small job fits before every reservation and should backfill"
    assert st[second] >= st[head], "the second job's own reservation comes after the head's"
    assert st[head] <= acct[a]["end_time"] + 1.0
    all_verified(node, acct, (a, head, second, small))


def test_expired_window_suspend_stops_and_resumes_the_job(node_factory):
    node = node_factory("fcfs+easy:suspend/fifo")
    a, head, late = expiring_backfill(node)
    acct = node.wait_all_done(timeout=240)
    assert events(node, late, "suspend") and events(node, late, "resume"), node.job(late)["events"]
    assert acct[late]["requeues"] == 0, "suspended, not restarted"
    assert acct[head]["start_time"] < acct[late]["end_time"]
    all_verified(node, acct, (a, head, late))


def test_submissions_arriving_together_are_decided_in_one_pass(node_factory):
    # FJT(1) equipartitions over the queue: two jobs decided together get one CPU each, while the
    # first alone would get both. The window is wide so that two CLI start-ups fall inside it.
    node = node_factory("fjt[fjt_long_mpl=1]/fifo", "sched_interval_ms = 2000.0\n")
    time.sleep(2.5)  # the launcher's first pass is past: the next event comes after a quiet interval
    a = node.submit("--procs", "2,1", "--time", "30s", "--", *send_app(10))
    b = node.submit("--procs", "2,1", "--time", "30s", "--", *send_app(10))
    acct = node.wait_all_done()
    assert (acct[a]["nranks"], acct[b]["nranks"]) == (1, 1), acct
    assert abs(acct[a]["start_time"] - acct[b]["start_time"]) < 0.5
    all_verified(node, acct, (a, b))
