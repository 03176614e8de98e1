"""The Prometheus endpoints of both daemons, scraped for real while real MPI jobs run, parsed with
prometheus_client's own parser; and the start refused when the operator's endpoint cannot be served."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from contextlib import closing
from dataclasses import fields
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BIN, REPO, STARTED_INSTANCES, vmsched_shm_entries, wait_for
from tests.launcher_harness import send_app
from vmsched.config import ConfigError, LogConfig, MetricsConfig, load_config, parse_listen

Metrics = dict[str, list[tuple[dict[str, str], float]]]


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> Metrics:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Metrics = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(m: Metrics, name: str, **labels: str) -> float:
    hits = [v for lab, v in m.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {m.get(name)}"
    return hits[0]


def test_scrape_while_a_folded_job_runs(node_factory):
    cm_port, launcher_port = free_port(), free_port()
    node = node_factory("fcfs/fifo", f'[metrics]\nlisten = "127.0.0.1:{cm_port}"\n'
                                     f'launcher_listen = "127.0.0.1:{launcher_port}"\n')  # fmt: skip
    # Runs until cancelled below, however fast this node is: the scrapes see it running.
    job = node.submit("-n", "4", "--max-mpl", "4", "--time", "120s", "--", *send_app(3000))
    label = str(job)

    def vmcpu_job() -> dict | None:
        st = json.loads(node.cli("vmcpu", "--json").stdout)
        return next((j for j in st["jobs"] if j["job"] == job), None)

    wait_for(lambda: (j := vmcpu_job()) and j["registered"] == 4, timeout=60, interval=0.05,
             what="the job's 4 ranks to register")  # fmt: skip
    shape = ("cpus", "mpl", "queue", "lbd")

    def consistent() -> tuple[dict, Metrics] | None:
        """A scrape between two equal vmcpu views (the LBD may move the job to local queues meanwhile)."""
        before, m, after = vmcpu_job(), scrape(cm_port), vmcpu_job()
        return (before, m) if before and after and all(before[k] == after[k] for k in shape) else None

    j, m = wait_for(consistent, timeout=30, interval=0.05, what="a stable view of the job")
    assert len(j["cpus"]) == 2 and j["mpl"] == 2, j  # 4 ranks folded onto 2 CPUs
    assert value(m, "vmsched_job_partition_cpus", job=label) == len(j["cpus"])
    assert value(m, "vmsched_job_mpl", job=label) == j["mpl"]
    assert value(m, "vmsched_job_max_mpl", job=label) == j["max_mpl"]
    assert value(m, "vmsched_job_ranks", job=label) == 4
    assert value(m, "vmsched_job_queue", job=label, queue=j["queue"]) == 1
    assert sum(v for lab, v in m["vmsched_job_queue"] if lab["job"] == label) == 1
    assert value(m, "vmsched_job_lbd_phase", job=label, phase=j["lbd"]) == 1
    assert value(m, "vmsched_cpus_managed") == 2 and value(m, "vmsched_cpus_idle") == 0
    assert value(m, "vmsched_repartitions_total") >= 1
    assert value(m, "vmsched_quantum_duration_seconds_count") > 0
    assert value(m, "vmsched_quantum_duration_seconds_bucket", le="+Inf") == value(
        m, "vmsched_quantum_duration_seconds_count")  # fmt: skip
    # Folded ranks hand their CPU to a sibling at MPI waits: the counter moves while the job runs.
    first = value(m, "vmsched_token_handoffs_total")
    wait_for(lambda: value(scrape(cm_port), "vmsched_token_handoffs_total") > first > 0, timeout=30,
             what="token hand-offs to be counted")  # fmt: skip

    q = scrape(launcher_port)
    assert value(q, "vmsched_jobs", state="running") == 1
    assert value(q, "vmsched_jobs", state="queued") == 0 and value(q, "vmsched_jobs", state="suspended") == 0
    assert value(q, "vmsched_job_submissions_total") == 1 and value(q, "vmsched_job_starts_total") == 1
    assert value(q, "vmsched_launcher_info", policy="fcfs/fifo") == 1
    # A second job waits: the first holds both CPUs. Cancelling the first lets it run to completion.
    second = node.submit("-n", "2", "--time", "60s", "--", *send_app(5))
    wait_for(lambda: value(scrape(launcher_port), "vmsched_jobs", state="queued") == 1, what="the second job queued")
    node.cli("vmcancel", str(job))

    acct = node.wait_all_done(timeout=180)
    assert acct[job]["state"] == "cancelled" and acct[second]["state"] == "completed"
    q = scrape(launcher_port)
    assert value(q, "vmsched_job_ends_total", cause="completed") == 1
    assert value(q, "vmsched_job_ends_total", cause="cancelled") == 1
    assert value(q, "vmsched_job_ends_total", cause="failed") == 0
    assert value(q, "vmsched_jobs", state="running") == 0
    assert value(q, "vmsched_job_submissions_total") == 2 and value(q, "vmsched_job_starts_total") == 2
    assert value(q, "vmsched_job_wait_seconds_count") == 2
    waits = acct[job]["wait"] + acct[second]["wait"]  # 10 ms per start between its event and its record
    assert value(q, "vmsched_job_wait_seconds_sum") == pytest.approx(waits, abs=0.02)
    m = scrape(cm_port)
    assert "vmsched_job_mpl" not in m and value(m, "vmsched_cpus_idle") == 2  # the job's series are gone
    assert value(m, "vmsched_token_handoffs_total") >= first  # ended ranks' hand-offs still count


def test_listen_addresses_parse():
    assert parse_listen("", "[metrics] listen") is None
    assert parse_listen("127.0.0.1:9469", "[metrics] listen") == ("127.0.0.1", 9469)
    assert parse_listen("[::1]:9469", "[metrics] listen") == ("::1", 9469)
    assert parse_listen("node7.example:9469", "[metrics] listen") == ("node7.example", 9469)
    for bad in ("localhost", "127.0.0.1:", ":9469", "127.0.0.1:http", "127.0.0.1:0", "127.0.0.1:70000", "a b:1"):
        with pytest.raises(ConfigError, match=r"\[metrics\] listen: cannot parse listen address"):
            parse_listen(bad, "[metrics] listen")


def test_config_errors_name_the_option(tmp_path):
    cases = {
        "[metrics]\nlisten = 9469\n": "[metrics] listen must be a string",
        '[metrics]\nlauncher_listen = "9470"\n': "[metrics] launcher_listen: cannot parse listen address '9470'",
        '[metrics]\nlisten = "127.0.0.1:9469"\nlauncher_listen = "127.0.0.1:9469"\n': "must differ",
        "[metrics]\nport = 1\n": "unknown option [metrics] port",
        '[log]\nlevel = "LOUD"\n': "[log] level must be one of DEBUG, INFO, WARNING, ERROR",
    }
    for text, message in cases.items():
        (tmp_path / "c.toml").write_text(text)
        with pytest.raises(ConfigError) as e:
            load_config(tmp_path / "c.toml", tmp_path / "state")
        assert message in str(e.value)


def run_daemon(name: str, state: Path, config: str) -> subprocess.CompletedProcess:
    state.mkdir(exist_ok=True)
    STARTED_INSTANCES.add(load_config(state_dir=state).instance)
    (state / "vmsched.toml").write_text(config)
    argv = [str(BIN / name), "--state-dir", str(state)] + (["--cpus", "0-1"] if name == "vm-cpumanager" else [])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


DAEMON_OPTIONS = [("vm-cpumanager", "listen"), ("vm-launcher", "launcher_listen")]


@pytest.mark.parametrize(("daemon", "option"), DAEMON_OPTIONS)
def test_unparseable_listen_address_refuses_to_start(tmp_path, daemon, option):
    r = run_daemon(daemon, tmp_path / "state", f'[metrics]\n{option} = "localhost"\n')
    assert r.returncode == 2
    assert f"{daemon}: [metrics] {option}: cannot parse listen address 'localhost'" in r.stderr


@pytest.mark.parametrize(("daemon", "option"), DAEMON_OPTIONS)
def test_port_in_use_refuses_to_start(tmp_path, daemon, option):
    with closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # The launcher binds its endpoint before waiting for a CPU manager: none is needed to see it refuse.
        r = run_daemon(daemon, tmp_path / "state", f'[metrics]\n{option} = "127.0.0.1:{port}"\n')
    assert r.returncode == 1
    assert f"[metrics] {option} = '127.0.0.1:{port}': cannot listen there: Address already in use" in r.stderr
    instance = load_config(state_dir=tmp_path / "state").instance
    assert not {n for n in vmsched_shm_entries() if instance in n}  # nothing created: no table, no socket
    assert not list((tmp_path / "state").glob("*.sock"))


def test_documented_sections_are_the_defaults(tmp_path):
    documented = load_config(REPO / "systemd" / "vmsched.toml", state_dir=tmp_path)
    assert documented.metrics == MetricsConfig() and documented.log == LogConfig()
    text = (REPO / "systemd" / "vmsched.toml").read_text()
    for f in fields(MetricsConfig) + fields(LogConfig):
        assert f"\n{f.name} =" in text, f"option {f.name} is not documented in systemd/vmsched.toml"
