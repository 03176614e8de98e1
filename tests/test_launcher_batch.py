"""Batch use as people know it from Slurm (issue 13), with the real daemons and real MPI jobs on 2 CPUs:
folding a job bigger than the node under every policy, pending reasons, job scripts, --wait,
dependencies, begin times, queue and accounting filters, SWF export, and bad input."""

from __future__ import annotations

import json

from tests.launcher_harness import Node, send_app, vmapp_result
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
        job = node.submit("-n", "4", "--max-mpl", "4", "--time", "1m", "--", *send_app(8))
        acct = node.wait_all_done(timeout=120)[job]
        assert acct["state"] == "completed" and acct["exit_code"] == 0, (policy, acct)
        assert acct["nranks"] == 4 and acct["mpl_history"] == "2", (policy, acct)
        [start] = [e for e in node.job(job)["events"] if e["kind"] == "start"]
        assert start["max_mpl"] == 2 and "folded to fit this node's 2 CPUs" in start["why"], (policy, start)
        assert vmapp_result(node.output(job))["verified"] is True
    set_policy(node, "fjt+easy:malleable")
    job = node.submit("-n", "4", "--", *send_app(4))  # no class, no time: the default (long) class
    assert node.wait_all_done(timeout=120)[job]["state"] == "completed"
    assert vmapp_result(node.output(job))["verified"] is True
    # Refused only when no allowed folding fits, saying why.
    r = node.cli("vmsubmit", "-n", "4", "--max-mpl", "1", "--", "true", check=False)
    assert r.returncode == 1 and "no allowed folding fits" in r.stderr, r.stderr
    r = node.cli("vmsubmit", "-n", "12", "--", "true", check=False)
    assert r.returncode == 1 and "no allowed folding fits" in r.stderr and "policy's limit" in r.stderr, r.stderr
    assert json.loads(node.cli("vmq", "--json").stdout)["jobs"] == []
