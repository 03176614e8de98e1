"""The measured runtime model: its pure functions on hand-made curves, the committed fitted file, and
the calibration command's refusals (one real calibration: tests/test_sim_calibration.py)."""

from __future__ import annotations

import datetime
import json
import math
import statistics
from pathlib import Path

import pytest

from tests.conftest import REPO
from vmsched.sim import calibrate
from vmsched.sim.runtime_model import (
    COMM_CLASSES,
    DEFAULT_PATH,
    MPL_POINTS,
    QUEUES,
    Measurement,
    RuntimeModel,
    fit,
    folded_runtime,
    load_model,
    slowdown,
)

CURVES = {
    "low": {"local": (1.0, 1.1, 1.3), "global": (1.0, 1.2, 1.6)},
    "medium": {"local": (1.0, 1.5, 2.5), "global": (1.0, 2.0, 3.0)},
    "high": {"local": (1.0, 2.0, 4.0), "global": (1.0, 3.0, 7.0)},
}
MODEL = RuntimeModel(CURVES)
HEAD = '{"format": "vmsched-runtime-model/1", "mpl_points": [1, 2, 4], '  # a file's start, for broken ones


def one_class(local: tuple[float, ...], glob: tuple[float, ...] | None = None) -> RuntimeModel:
    return RuntimeModel({"low": {"local": local, "global": glob or local}})


@pytest.fixture(scope="module")
def committed() -> RuntimeModel:
    return load_model()


# --- slowdown ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mpl", [0.25, 0.5, 1, 1.0])
def test_no_folding_costs_nothing(mpl: float) -> None:
    for cls in (*COMM_CLASSES, "mixed"):
        for queue in QUEUES:
            assert slowdown(MODEL, cls, queue, mpl) == 1.0


def test_slowdown_goes_through_the_measured_points_and_interpolates_linearly() -> None:
    assert slowdown(MODEL, "high", "global", 2) == 3.0
    assert slowdown(MODEL, "high", "global", 4) == 7.0
    assert slowdown(MODEL, "low", "local", 1.5) == pytest.approx(1.05)
    assert slowdown(MODEL, "medium", "local", 3) == pytest.approx(2.0)
    assert slowdown(MODEL, "high", "local", 2.5) == pytest.approx(2.5)


def test_beyond_the_last_point_the_last_segment_is_extended() -> None:
    assert slowdown(MODEL, "low", "local", 6) == pytest.approx(1.5)  # 1.3 + 0.1 per MPL
    assert slowdown(MODEL, "high", "global", 8) == pytest.approx(15.0)  # 7 + 2 per MPL


def test_a_falling_last_segment_is_not_extrapolated_downwards() -> None:
    m = one_class((1.0, 1.5, 1.2))
    assert slowdown(m, "low", "local", 3) == pytest.approx(1.35)
    assert slowdown(m, "low", "local", 8) == pytest.approx(1.2)
    assert slowdown(m, "low", "local", 100) == pytest.approx(1.2)


def test_a_measured_speedup_is_never_modelled_below_one() -> None:
    m = one_class((1.0, 0.8, 0.7))
    for mpl in (1.2, 2, 3, 4, 16):
        assert slowdown(m, "low", "local", mpl) == 1.0
    rising = one_class((1.0, 0.8, 0.9))  # beyond 4 it rises by 0.05 per MPL from the raw 0.9
    assert [slowdown(rising, "low", "local", mpl) for mpl in (3, 5, 6, 8)] == pytest.approx([1.0, 1.0, 1.0, 1.1])


def test_mixed_is_the_mean_of_the_three_classes() -> None:
    for queue in QUEUES:
        for mpl in (1.5, 2, 3, 4, 6):
            expected = statistics.fmean(slowdown(MODEL, c, queue, mpl) for c in COMM_CLASSES)
            assert slowdown(MODEL, "mixed", queue, mpl) == pytest.approx(expected)
    assert slowdown(MODEL, "mixed", "global", 2) == pytest.approx((1.2 + 2.0 + 3.0) / 3)


def test_slowdown_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="communication class 'huge'"):
        slowdown(MODEL, "huge", "local", 2)
    with pytest.raises(ValueError, match="unknown queue 'lbd'"):
        slowdown(MODEL, "low", "lbd", 2)
    with pytest.raises(ValueError, match="mpl must be a number"):
        slowdown(MODEL, "low", "local", math.nan)
    with pytest.raises(ValueError, match="this model has: low, mixed"):
        slowdown(one_class((1.0, 1.1, 1.2)), "high", "local", 2)


# --- folded_runtime ---------------------------------------------------------------------------------


def test_a_job_with_a_cpu_per_rank_takes_its_base_time() -> None:
    for cpus in (8, 9, 64):
        for cls in (*COMM_CLASSES, "mixed"):
            assert folded_runtime(MODEL, 123.5, 8, cpus, cls, "local") == 123.5


def test_folded_runtime_is_sharing_times_slowdown() -> None:
    assert folded_runtime(MODEL, 100.0, 8, 2, "high", "global") == pytest.approx(100 * 4 * 7.0)
    assert folded_runtime(MODEL, 100.0, 8, 4, "low", "local") == pytest.approx(100 * 2 * 1.1)
    assert folded_runtime(MODEL, 100.0, 6, 4, "medium", "local") == pytest.approx(100 * 1.5 * 1.25)
    mixed = statistics.fmean((1.2, 2.0, 3.0))
    assert folded_runtime(MODEL, 10.0, 4, 2) == pytest.approx(10 * 2 * mixed)  # defaults: mixed, global


@pytest.mark.parametrize("which", ["hand-made", "committed"])
def test_more_cpus_never_make_a_job_slower(which: str, committed: RuntimeModel) -> None:
    model = MODEL if which == "hand-made" else committed
    for cls in (*model.curves, "mixed"):
        for queue in QUEUES:
            for nranks in (1, 2, 3, 4, 8, 13, 32, 64):
                times = [folded_runtime(model, 60.0, nranks, cpus, cls, queue) for cpus in range(1, nranks + 2)]
                assert all(a >= b for a, b in zip(times, times[1:], strict=False)), (cls, queue, nranks, times)
                assert times[-1] == 60.0


def test_folded_runtime_refuses_bad_arguments() -> None:
    for kwargs, msg in (
        ({"base": -1.0}, "base run time"),
        ({"base": math.inf}, "base run time"),
        ({"nranks": 0}, "nranks must be an integer >= 1"),
        ({"cpus": 0}, "cpus must be an integer >= 1"),
        ({"cpus": 1.5}, "cpus must be an integer >= 1"),
        ({"nranks": True}, "nranks must be an integer"),
        ({"comm_class": "extreme"}, "communication class 'extreme'"),
        ({"queue": "lbd"}, "unknown queue"),
    ):
        args = {"base": 10.0, "nranks": 4, "cpus": 2, "comm_class": "low", "queue": "local"} | kwargs
        with pytest.raises(ValueError, match=msg):
            folded_runtime(MODEL, **args)


def test_a_model_with_a_missing_queue_or_a_bad_curve_is_refused() -> None:
    with pytest.raises(ValueError, match="needs curves for queues"):
        RuntimeModel({"low": {"local": (1.0, 1.1, 1.2)}})
    with pytest.raises(ValueError, match="starting with 1.0"):
        one_class((1.1, 1.2, 1.3))
    with pytest.raises(ValueError, match="starting with 1.0"):
        one_class((1.0, 1.2))
    with pytest.raises(ValueError, match="unknown communication class"):
        RuntimeModel({"extreme": CURVES["low"]})


# --- fit --------------------------------------------------------------------------------------------


def runs(app: str, cls: str, queue: str, cpus: int, seconds: dict[int, list[float]]) -> list[Measurement]:
    return [Measurement(app, cls, queue, cpus * mpl, cpus, s) for mpl, reps in seconds.items() for s in reps]


def test_fit_takes_the_median_over_repetitions_then_over_the_apps_of_a_class() -> None:
    data = [
        # low: one app; reps 10/12/11 at MPL 1 -> 11; MPL 2 median 13.2 -> 1.2; MPL 4 median 16.5 -> 1.5
        *runs("ep", "low", "local", 2, {1: [10, 12, 11], 2: [13.2, 13.0, 20.0], 4: [16.5, 16.0, 17.0]}),
        *runs("ep", "low", "global", 2, {1: [10], 2: [14], 4: [18]}),
        # medium: three apps, ratios at MPL 2 of 1.5, 2.0, 4.0 -> median 2.0; MPL 4 of 2, 3, 5 -> 3
        *runs("mg", "medium", "local", 2, {1: [2], 2: [3], 4: [4]}),
        *runs("ft", "medium", "local", 2, {1: [4], 2: [8], 4: [12]}),
        *runs("send", "medium", "local", 2, {1: [1], 2: [4], 4: [5]}),
        # global: two apps -> median = mean: (1.5 + 2.5) / 2 and (2 + 4) / 2; one of them on P = 1
        *runs("mg", "medium", "global", 2, {1: [2], 2: [3], 4: [4]}),
        *runs("ft", "medium", "global", 1, {1: [4], 2: [10], 4: [16]}),
    ]
    model = fit(data, command="by hand")
    assert set(model.curves) == {"low", "medium"}
    assert model.curves["low"]["local"] == pytest.approx((1.0, 1.2, 1.5))
    assert model.curves["low"]["global"] == pytest.approx((1.0, 1.4, 1.8))
    assert model.curves["medium"]["local"] == pytest.approx((1.0, 2.0, 3.0))
    assert model.curves["medium"]["global"] == pytest.approx((1.0, 2.0, 3.0))
    assert model.command == "by hand" and len(model.measurements) == len(data)


def test_fit_refuses_incomplete_or_bad_measurements() -> None:
    with pytest.raises(ValueError, match="no run at MPL 1"):
        fit(runs("ep", "low", "local", 2, {2: [1.0], 4: [1.0]}) + runs("ep", "low", "global", 2, {1: [1], 2: [1]}))
    with pytest.raises(ValueError, match="global queue: no measurements at MPL"):
        fit(runs("ep", "low", "local", 2, {1: [1], 2: [1], 4: [1]}) + runs("ep", "low", "global", 2, {1: [1]}))
    with pytest.raises(ValueError, match="not an MPL of"):
        fit([Measurement("ep", "low", "local", 6, 2, 1.0)])
    with pytest.raises(ValueError, match="seconds must be a positive number"):
        fit([Measurement("ep", "low", "local", 2, 2, 0.0)])
    with pytest.raises(ValueError, match="no measurements"):
        fit([])


# --- the committed file -----------------------------------------------------------------------------


def test_the_committed_model_covers_every_class_and_queue_and_was_measured(committed: RuntimeModel) -> None:
    assert set(committed.curves) == set(COMM_CLASSES)
    for cls in COMM_CLASSES:
        assert set(committed.curves[cls]) == set(QUEUES)
    assert committed.command.startswith("vmsim-calibrate ") and "--quick" not in committed.command
    assert "--out vmsched/sim/runtime_model.json" in committed.command
    assert committed.command in (REPO / "vmsched/sim/calibrate.py").read_text()  # the docstring says how
    datetime.datetime.fromisoformat(committed.date)
    assert committed.host
    # every (class, queue, MPL) cell was run, and the curves are what fit() makes of the raw runs
    cells = {(m.comm_class, m.queue, m.nranks // m.cpus) for m in committed.measurements}
    assert cells == {(c, q, mpl) for c in COMM_CLASSES for q in QUEUES for mpl in MPL_POINTS}
    refit = fit(committed.measurements)
    for cls in COMM_CLASSES:
        for queue in QUEUES:
            assert committed.curves[cls][queue] == pytest.approx(refit.curves[cls][queue], abs=1e-4)


def test_the_committed_runs_were_long_enough_and_verified() -> None:
    doc = json.loads(DEFAULT_PATH.read_text())
    base = [r for r in doc["runs"] if r["mpl"] == 1]
    assert base and all(r["seconds"] >= 0.9 for r in base), [(r["app"], r["seconds"]) for r in base]
    # the checksum of an app does not depend on how many ranks it had or how they were folded
    for app in {r["app"] for r in doc["runs"]}:
        assert len({r["checksum"] for r in doc["runs"] if r["app"] == app}) == 1, app


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"format": "something/else"}', "format is 'something/else'"),
        (HEAD + '"curves": {"low": {"local": ["x"]}}}', "non-number"),
        (HEAD + '"curves": {"low": {"local": [1, 2, 3]}}}', "needs curves for queues"),
        (HEAD + '"curves": {"low": []}}', "must map each class"),
        (HEAD + '"curves": {"low": {"local": [1, 2, 3], "global": [1, 2, 3]}}, "runs": {}}', "'runs' must be a list"),
        (HEAD.replace("4]", "3]") + '"curves": {}}', "mpl_points"),
    ],
)
def test_a_malformed_file_is_refused_naming_it(tmp_path: Path, text: str, msg: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=msg) as err:
        load_model(path)
    assert str(path) in str(err.value)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read") as err:
        load_model(tmp_path / "nowhere.json")
    assert "nowhere.json" in str(err.value)


def test_a_committed_run_record_that_lies_is_refused(tmp_path: Path) -> None:
    doc = json.loads(DEFAULT_PATH.read_text())
    doc["runs"][0]["nranks"] = 3  # not P x an MPL of 1, 2, 4
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not an MPL of") as err:
        load_model(path)
    assert "edited.json" in str(err.value)


# --- the calibration command --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--reps", "0"], "--reps must be >= 1"),
        (["--apps", "ring"], "cannot be calibrated"),
        (["--apps", "btmz"], "cannot be calibrated"),
        (["--apps", "ep,nosuch"], "unknown app 'nosuch'"),
        (["--partitions", "99"], "--partitions must lie between 1 and"),
        (["--partitions", "two"], "comma-separated integers"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_options_exit_2_before_anything_runs(tmp_path: Path, argv: list[str], msg: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "model.json"
    with pytest.raises(SystemExit) as exit_:
        calibrate.main([*argv, "--out", str(out)])
    assert exit_.value.code == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()
