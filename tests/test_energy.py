"""Energy per job (issue 13): the split rule, the RAPL reader on a fake powercap tree, and the model path
with the real daemons: two jobs sharing the node get energy in proportion to their CPU-seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.launcher_harness import send_for, vmapp_result
from vmsched.launcher.energy import EnergyMeter, RaplReader, cpu_seconds_between, model_energy, split_energy
from vmsched.protocol import Client


def test_cpu_seconds_between():
    segs = [(10.0, 2), (12.0, 1), (15.0, 0)]
    assert cpu_seconds_between(segs, 0.0, 20.0) == 2 * 2 + 3 * 1
    assert cpu_seconds_between(segs, 11.0, 13.0) == 2 * 1 + 1 * 1
    assert cpu_seconds_between(segs, 16.0, 20.0) == 0.0
    assert cpu_seconds_between([(0.0, 3)], 5.0, 7.0) == 6.0  # still running: up to the end of the window


def test_split_energy_adds_up_and_follows_cpu_seconds():
    # 2 CPUs, 10 s, idle power 10 W: 100 J idle; 300 J measured. Job 1 held 1 CPU all along, job 2 half.
    shares, rest = split_energy(300.0, 10.0, 2, 10.0, {1: 10.0, 2: 5.0})
    assert shares[1] == pytest.approx(50.0 + 200.0 * 10 / 15) and shares[2] == pytest.approx(25.0 + 200.0 * 5 / 15)
    assert rest == pytest.approx(25.0)  # idle energy of the CPU-seconds no job held
    assert sum(shares.values()) + rest == pytest.approx(300.0)
    # Less than the idle power measured: all of it is idle energy, split per CPU.
    shares, rest = split_energy(50.0, 10.0, 2, 10.0, {1: 20.0})
    assert shares == {1: pytest.approx(50.0)} and rest == pytest.approx(0.0)
    shares, rest = split_energy(80.0, 10.0, 2, 5.0, {})
    assert shares == {} and rest == 80.0
    # Under the model every job pays P_max / ncpus per CPU-second.
    e = model_energy(10.0, 2, 10.0, 50.0, 15.0)
    shares, rest = split_energy(e, 10.0, 2, 10.0, {1: 10.0, 2: 5.0})
    assert shares[1] == pytest.approx(25.0 * 10) and shares[2] == pytest.approx(25.0 * 5)


def fake_zone(root: Path, name: str, label: str, uj: int, span: int = 1_000_000_000) -> Path:
    z = root / name
    z.mkdir()
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{span}\n")
    return z


def test_rapl_reader_on_a_fake_powercap_tree(tmp_path):
    p0 = fake_zone(tmp_path, "intel-rapl:0", "package-0", 5_000_000)
    core = fake_zone(tmp_path, "intel-rapl:0:0", "core", 1_000_000)  # part of package 0: not added
    p1 = fake_zone(tmp_path, "intel-rapl:1", "package-1", 999_000_000)
    reader = RaplReader(tmp_path)
    assert reader.available() and reader.read_joules() == 0.0
    (p0 / "energy_uj").write_text("7000000\n")  # +2 J
    (core / "energy_uj").write_text("9000000\n")
    (p1 / "energy_uj").write_text("3000000\n")  # wrapped at 1000 J: +1 J +3 J
    assert reader.read_joules() == pytest.approx(6.0)
    meter = EnergyMeter("auto", str(tmp_path), 10.0, 50.0)
    assert meter.source == "rapl"
    (p0 / "energy_uj").write_text("17000000\n")
    assert meter.interval_energy(1.0, 2, 0.0) == pytest.approx(10.0)  # measured, not the model's
    # A platform (psys) zone covers the packages: used alone.
    fake_zone(tmp_path, "intel-rapl:2", "psys", 0)
    assert [z.name for z in RaplReader(tmp_path).zones] == ["intel-rapl:2"]


def test_no_rapl_means_the_model_unless_rapl_is_required(tmp_path):
    assert EnergyMeter("auto", str(tmp_path / "none"), 10.0, 50.0).source == "model"
    with pytest.raises(ValueError, match="no readable RAPL counters"):
        EnergyMeter("rapl", str(tmp_path), 10.0, 50.0)
    meter = EnergyMeter("model", str(tmp_path), 10.0, 50.0)
    assert meter.interval_energy(2.0, 2, 3.0) == pytest.approx(10.0 * 2 + 40.0 * 3 / 2)


P_IDLE, P_MAX = 10.0, 50.0
MODEL = f'energy_source = "model"\npower_idle_w = {P_IDLE}\npower_max_w = {P_MAX}\nenergy_interval_s = 0.25\n'


def test_two_jobs_sharing_the_node_get_energy_in_proportion_to_their_cpu_seconds(node_factory):
    node = node_factory("fcfs/fifo", MODEL)
    with Client(node.cfg.launcher_socket) as c:
        e0 = c.call("info")["energy"]
        assert e0["source"] == "model"
        # sized in seconds, not iterations: on a faster node the two would come closer than 1.5x
        long = node.submit("-n", "1", "--time", "60s", "--", *send_for(3.0))  # start-up (~0.7 CPU-s) included
        short = node.submit("-n", "1", "--time", "60s", "--", *send_for(0.5))
        acct = node.wait_all_done()
        time.sleep(0.6)  # one more reading of the meter after the last end
        e1 = c.call("info")["energy"]
    for j in (long, short):
        assert acct[j]["state"] == "completed" and vmapp_result(node.output(j))["verified"]
    assert acct[long]["start_time"] < acct[short]["end_time"], "the two jobs should have shared the node"
    cpu_s = {j: acct[j]["cpu_seconds"] for j in (long, short)}
    energy = {j: acct[j]["energy_j"] for j in (long, short)}
    assert cpu_s[long] > 1.5 * cpu_s[short] > 0
    # In proportion to CPU-seconds: P_max / ncpus joules per CPU-second held, for each job.
    for j in (long, short):
        assert energy[j] == pytest.approx(P_MAX / 2 * cpu_s[j], rel=0.01), (j, energy, cpu_s)
    assert energy[long] / energy[short] == pytest.approx(cpu_s[long] / cpu_s[short], rel=0.01)
    # The jobs' energy and the node's unattributed idle energy add up to the node's total ...
    node_j = e1["node_j"] - e0["node_j"]
    idle_j = e1["unattributed_j"] - e0["unattributed_j"]
    assert sum(energy.values()) + idle_j == pytest.approx(node_j, rel=0.01)
    # ... which is the model's energy over that time, from the accounting's CPU-seconds.
    expected = P_IDLE * (e1["time"] - e0["time"]) + (P_MAX - P_IDLE) / 2 * sum(cpu_s.values())
    assert node_j == pytest.approx(expected, rel=0.01)
    # vmacct shows joules and kWh per job and per user.
    table = node.cli("vmacct", "--format", "id,energy_j,energy_kwh").stdout
    assert f"{energy[long]:.1f}" in table and "energy by user" in table
    assert f"{sum(energy.values()):.1f}" in table


def test_the_launcher_refuses_to_start_when_rapl_is_required_but_unreadable(tmp_path):
    import subprocess

    from tests.conftest import BIN, CpuManagerProcess

    state = tmp_path / "state"
    state.mkdir()
    (state / "vmsched.toml").write_text(f'[launcher]\nenergy_source = "rapl"\nrapl_root = "{tmp_path / "none"}"\n')
    cm = CpuManagerProcess(state).start()
    try:
        r = subprocess.run([str(BIN / "vm-launcher"), "--state-dir", str(state)], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    finally:
        cm.stop()
    assert r.returncode == 2 and "no readable RAPL counters under" in r.stderr, (r.returncode, r.stderr)


def test_the_launcher_splits_measured_rapl_energy_from_a_fake_powercap_tree(node_factory, tmp_path):
    """The RAPL path end to end: the only fake is the powercap tree, whose counter a thread advances at
    a constant 30 W (wrapping at 50 J, so the launcher must unwrap it)."""
    import threading

    zone = fake_zone(tmp_path, "intel-rapl:0", "package-0", 0, span=50_000_000)
    watts, t_start, stop = 30.0, time.time(), threading.Event()

    def counter() -> None:
        while not stop.is_set():
            uj = int(watts * (time.time() - t_start) * 1e6) % 50_000_000
            (zone / "energy_uj.tmp").write_text(f"{uj}\n")
            (zone / "energy_uj.tmp").replace(zone / "energy_uj")  # never a half-written file
            # Every 2 ms: a reading sees the counter up to one step stale, and an interval that reads more
            # than idle gives the excess wholly to the jobs in it (the error the README states), at the
            # job's first and last intervals. At 10 ms steps that came to 1.33 J of a 44.3 J job in one CI
            # run (the 3 % below is 1.33 J); at 2 ms it is at most some 0.25 J.
            time.sleep(0.002)

    writer = threading.Thread(target=counter)
    writer.start()
    try:
        # Idle power = the counter's rate: what the job gets is exactly its CPUs' pro-rata share of the
        # measured energy (the energy above idle of an interval goes to the jobs of that interval whole,
        # so with idle below the rate a job would also get the dynamic energy of its start's and end's
        # intervals before and after it ran - the error the README states).
        node = node_factory("fcfs/fifo", f'energy_source = "rapl"\nrapl_root = "{tmp_path}"\npower_idle_w = 30.0\n'
                                         "power_max_w = 60.0\nenergy_interval_s = 0.25\n")  # fmt: skip
        with Client(node.cfg.launcher_socket) as c:
            e0 = c.call("info")["energy"]
            assert e0["source"] == "rapl"
            # A fixed 3 s of run: the boundary error is a few tenths of a joule whatever the job's length, so
            # 40 iterations, 0.64 s of it held on a faster node, missed the 3 % (20.0 J against 19.3 J).
            job = node.submit("-n", "2", "--time", "60s", "--", *send_for(3.0))
            acct = node.wait_all_done()[job]
            time.sleep(0.6)
            e1 = c.call("info")["energy"]
    finally:
        stop.set()
        writer.join()
    assert acct["state"] == "completed" and vmapp_result(node.output(job))["verified"]
    node_j = e1["node_j"] - e0["node_j"]
    assert node_j == pytest.approx(watts * (e1["time"] - e0["time"]), rel=0.02)  # measured, unwrapped
    # Alone on the node, holding both CPUs: it gets all that was measured while it held them.
    held_s = acct["cpu_seconds"] / 2
    assert acct["energy_j"] == pytest.approx(watts * held_s, rel=0.03), (acct["energy_j"], held_s)
    assert acct["energy_j"] + e1["unattributed_j"] - e0["unattributed_j"] == pytest.approx(node_j, rel=0.01)
