"""Poisson generator (thesis eq. 3.2) and the example workloads."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from vmsched.workloads import catalog, mixes
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.generate import (
    MixEntry,
    WorkloadSpec,
    arrival_rate,
    generate,
    mix_by_class,
    mix_from_weights,
)
from vmsched.workloads.params import job_requests, read_params_dir
from vmsched.workloads.swf import format_swf, read_swf

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "vmsched" / "workloads" / "examples"


def _spec(**changes) -> WorkloadSpec:
    mix = mix_from_weights([(catalog.app("cg.A"), 3.0), (catalog.app("sweep.W"), 1.0)])
    return replace(WorkloadSpec(cpus=2, utilization=0.8, mix=mix, duration=600, seed=7), **changes)


def test_arrival_rate_is_equation_3_2() -> None:
    # 60 CPUs, 60 % load, a quarter of it from an application of 400 s sequential time
    assert arrival_rate(60, 0.6, 0.25, 400) == pytest.approx(60 * 0.6 * 0.25 / 400)
    assert arrival_rate(2, 1.0, 1.0, 20) == pytest.approx(0.1)


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    a, b, c = generate(_spec()), generate(_spec()), generate(_spec(seed=8))
    assert a.arrivals == b.arrivals
    assert format_swf(a.swf()) == format_swf(b.swf())
    assert a.arrivals != c.arrivals


def test_arrivals_are_ordered_whole_seconds_before_the_duration_limit() -> None:
    w = generate(_spec())
    times = [a.submit_time for a in w.arrivals]
    assert times == sorted(times)
    assert all(0 <= t < 600 and t == int(t) for t in times)
    assert [a.job_number for a in w.arrivals] == list(range(1, len(times) + 1))


def test_long_run_hits_target_utilization_and_each_rate() -> None:
    duration = 300_000.0
    spec = _spec(duration=duration, utilization=0.7, seed=3)
    w = generate(spec)
    assert w.offered_utilization() == pytest.approx(0.7, rel=0.03)
    counts = Counter(a.app_number for a in w.arrivals)
    for index, entry in enumerate(spec.mix):
        expected = arrival_rate(spec.cpus, spec.utilization, entry.fraction, entry.app.t1) * duration
        assert counts[index] == pytest.approx(expected, rel=0.05)


def test_mix_by_class_splits_like_the_thesis() -> None:
    apps = mixes.app_set("hc")
    mix = mix_by_class(apps, 0.8, 0.2)
    shares = {e.app.key: e.fraction * 0.8 for e in mix}
    assert shares == pytest.approx({"cg.A": 0.3, "sweep.A": 0.3, "cg.W": 0.1, "sweep.W": 0.1})
    with pytest.raises(WorkloadError, match="short utilization 0.9 must be between 0 and 0.8"):
        mix_by_class(apps, 0.8, 0.9)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cpus": 0}, "cpus must be >= 1"),
        ({"utilization": 0}, "utilization must be > 0"),
        ({"duration": 0}, "duration must be > 0"),
        ({"mix": ()}, "the mix has no application"),
        ({"mix": (MixEntry(catalog.app("ep.S"), 0.5),)}, "must sum to 1"),
    ],
)
def test_bad_specs_are_rejected(changes: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        generate(_spec(**changes))


def test_unknown_application_lists_the_known_ones() -> None:
    with pytest.raises(WorkloadError, match="unknown application 'zz.A'; known: ep.S"):
        catalog.app("zz.A")


def test_generated_parameter_files_read_back(tmp_path: Path) -> None:
    w = generate(_spec())
    w.write_params(tmp_path / "p")
    params = read_params_dir(tmp_path / "p")
    requests = job_requests(params)
    assert len(requests) == len(w.arrivals)
    assert [r.submit_time for r in requests] == [a.submit_time for a in w.arrivals]
    by_app = {
        0: ("long", "mpiexec -n 4 python -m vmsched.apps.cg --class A"),
        1: ("short", "mpiexec -n 4 python -m vmsched.apps.sweep --class W"),
    }
    for r in requests:
        assert (r.job_class, r.command()) == by_app[r.app_number]
    w.write_swf(tmp_path / "t.swf")
    log = read_swf(tmp_path / "t.swf")
    assert log.header["MaxProcs"] == "2"
    assert [j.queue_number for j in log.jobs] == [1 if r.job_class == "long" else 2 for r in requests]


@pytest.mark.parametrize("name", sorted(mixes.EXAMPLES))
def test_examples_meet_their_class_utilization(name: str) -> None:
    ex = mixes.example(name)
    w = mixes.generate_example(name)
    cap = ex.spec().cpus * ex.spec().duration
    t1 = [e.app.t1 for e in w.spec.mix]
    per_class = Counter()
    for a in w.arrivals:
        per_class[w.applications[a.app_number].job_class] += t1[a.app_number] / cap
    assert per_class["long"] == pytest.approx(ex.long_utilization, abs=0.005)
    assert per_class["short"] == pytest.approx(ex.short_utilization, abs=0.005)
    assert 10 <= len(w.arrivals) <= 30  # replayable on 2 CPUs


def test_committed_example_files_match_the_generator() -> None:
    for ex in mixes.EXAMPLES.values():
        w = mixes.generate_example(ex.name)
        directory = EXAMPLES_DIR / ex.app_set
        assert (directory / f"{ex.name}.swf").read_text() == format_swf(w.swf()), ex.name
        assert (directory / "template.txt").read_text() == "".join(a.template + "\n" for a in w.applications)
        params = read_params_dir(directory, f"{ex.name}.swf")
        assert params.applications == w.applications
