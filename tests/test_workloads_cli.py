"""``vmworkload`` command line: outputs, JSON, and exit codes (0 ok, 1 bad input, 2 usage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA
from vmsched.workloads.cli import main
from vmsched.workloads.params import read_params_dir
from vmsched.workloads.swf import read_swf

ROOT = Path(__file__).resolve().parents[1]
LUBLIN = SHARED_DATA / "lublin_256.swf"
EXAMPLES = ROOT / "vmsched" / "workloads" / "examples"

RESULT_A = """; MaxProcs: 2
1 0 0 100 2 -1 -1 2 150 -1 1 -1 -1 0 1 -1 -1 -1
2 10 90 20 2 -1 -1 2 30 -1 1 -1 -1 2 2 -1 -1 -1
3 20 100 20 1 -1 -1 1 30 -1 1 -1 -1 2 2 -1 -1 -1
"""
RESULT_B = """; MaxProcs: 2
1 0 0 120 2 -1 -1 2 150 -1 1 -1 -1 0 1 -1 -1 -1
2 10 0 20 1 -1 -1 2 30 -1 1 -1 -1 2 2 -1 -1 -1
3 20 0 20 1 -1 -1 1 30 -1 1 -1 -1 2 2 -1 -1 -1
"""


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_check_swf(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(LUBLIN), "--json"]) == 0
    out = _json(capsys)
    assert out["jobs"] == 10000 and out["machine_size"] == 256 and out["comment_lines"] == 7
    assert main(["check", str(LUBLIN)]) == 0
    assert "OK, swf, 10000 job(s)" in capsys.readouterr().out


def test_check_parameter_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / "hc"), "--trace", "ch6-hc-80.swf", "--json"]) == 0
    out = _json(capsys)
    assert out["kind"] == "parameter files" and out["jobs"] == out["long"] + out["short"] == 18
    assert [a["name"] for a in out["applications"]] == ["cg.A", "sweep.A", "cg.W", "sweep.W"]


def test_malformed_swf_exits_1_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.swf"
    good = "1 0 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1"
    bad.write_text(f"; x\n{good}\n2 5 -1 -7 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1\n")
    for command in (["check"], ["characterize"], ["metrics"]):
        assert main([*command, str(bad)]) == 1
        err = capsys.readouterr().err
        assert f"{bad}:3: field 4 (run_time) is negative (-7)" in err
    assert main(["compare", str(bad), str(bad)]) == 1
    assert main(["check", str(tmp_path / "missing.swf")]) == 1
    assert "missing.swf: no such file" in capsys.readouterr().err


def test_bad_parameter_files_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "p"
    d.mkdir()
    (d / "allowed_procs.txt").write_text("4 -1\n")
    (d / "job_types.txt").write_text("1\n")
    (d / "trace.swf").write_text("0 2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1\n")
    assert main(["check", str(d)]) == 1
    assert "template.txt: template file is missing" in capsys.readouterr().err
    (d / "template.txt").write_text("mpiexec -n N python -m vmsched.apps.ep --class A\n")
    assert main(["check", str(d)]) == 1
    assert f"{d / 'trace.swf'}:1: unknown application number 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["check"],
        ["check", "x", "--bogus"],
        ["characterize", "x", "--threshold", "-1"],
        ["generate"],
        ["generate", "--mix", "cg.A", "--short-util", "0.2"],
        ["generate", "--mix", "hc", "--util", "0.5", "--short-util", "0.7"],
        ["generate", "--mix", "zz.A"],
        ["generate", "--mix", "cg.A=-1"],
        ["generate", "--mix", "hc", "--t1", "cg.A=0"],
        ["generate", "--example", "nope"],
        ["generate", "--example", "ch6-hc-80", "--util", "0.5"],
        ["generate", "--mix", "hc", "--cpus", "0"],
        ["metrics", "x", "--tau", "0"],
        ["compare", "a", "b", "--tolerance", "2"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_generate_writes_swf_and_parameter_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "--mix", "hc", "--util", "0.8", "--short-util", "0.2", "--duration", "900", "--seed", "5"]
    assert main([*argv, "-o", str(tmp_path / "w.swf"), "--params-dir", str(tmp_path / "p"), "--json"]) == 0
    out = _json(capsys)
    assert out["jobs"] == len(read_swf(tmp_path / "w.swf").jobs) == len(read_params_dir(tmp_path / "p").arrivals)
    assert out["target_utilization"] == 0.8 and out["cpus"] == 2 and out["seed"] == 5
    assert {a["name"]: round(a["fraction"], 3) for a in out["applications"]} == {
        "cg.A": 0.375,
        "sweep.A": 0.375,
        "cg.W": 0.125,
        "sweep.W": 0.125,
    }
    assert (tmp_path / "w.swf").read_text() == (tmp_path / "p" / "trace.swf").read_text()
    assert main([*argv]) == 0  # no output file: the trace goes to stdout
    assert capsys.readouterr().out == (tmp_path / "w.swf").read_text()


def test_generate_example_matches_committed_file(tmp_path: Path) -> None:
    assert main(["generate", "--example", "ch6-lc-100", "-o", str(tmp_path / "x.swf")]) == 0
    assert (tmp_path / "x.swf").read_text() == (EXAMPLES / "lc" / "ch6-lc-100.swf").read_text()


def test_generate_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--list", "--json"]) == 0
    out = _json(capsys)
    assert "sweep.W" in out["applications"] and "ch6-hc-100" in out["examples"]


def test_characterize_lublin_json_split_matches_printed_medians(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["characterize", str(LUBLIN), "--json"]) == 0
    out = _json(capsys)
    sizes, runs = [], []
    for line in LUBLIN.read_text().splitlines():
        if not line.startswith(";"):
            fields = line.split()
            if float(fields[3]) >= 1 and float(fields[4]) >= 1:
                sizes.append(float(fields[4]))
                runs.append(float(fields[3]))
    counts = {"HH": 0, "HL": 0, "LL": 0, "LH": 0}
    for size, run in zip(sizes, runs, strict=True):
        counts[("L" if size <= out["median_size"] else "H") + ("L" if run <= out["median_runtime"] else "H")] += 1
    assert out["counts"] == counts
    assert set(out["weekdays"]) == {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
    assert main(["characterize", str(LUBLIN), "--markdown", "--threshold", "5"]) == 0
    text = capsys.readouterr().out
    assert "| i | hours | jobs | %HH | %HL | %LL | %LH |" in text and "**Saturday**" in text


def test_metrics_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.swf", tmp_path / "b.swf"
    a.write_text(RESULT_A)
    b.write_text(RESULT_B)
    assert main(["metrics", str(a), "--json", "--plots", str(tmp_path / "plots")]) == 0
    out = _json(capsys)
    assert out["cpus"] == 2 and out["makespan"] == 140 and out["classes"]["all"]["jobs"] == 3
    assert out["classes"]["short"]["mean_response"] == pytest.approx((110 + 120) / 2)
    assert out["classes"]["all"]["mean_bounded_slowdown"]["10"] == pytest.approx((1 + 5.5 + 6) / 3)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "partitions.png",
        "response_by_class.png",
        "utilization.png",
    ]
    assert main(["metrics", str(a)]) == 0
    assert "per class" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--json", "--plot", str(tmp_path / "cdf.png")]) == 0
    out = _json(capsys)
    assert out["ratios"] == {"1": 1.2, "2": pytest.approx(20 / 110), "3": pytest.approx(20 / 120)}
    assert out["overall"]["better"] == pytest.approx(2 / 3) and out["overall"]["worse"] == pytest.approx(1 / 3)
    assert (tmp_path / "cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", str(a), str(b), "--markdown", "--label-a", "fcfs", "--label-b", "fjt"]) == 0
    assert "relative performance of fjt vs fcfs" in capsys.readouterr().out


def test_compare_different_workloads_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.swf", tmp_path / "b.swf"
    a.write_text(RESULT_A)
    b.write_text(RESULT_B.replace("\n3 20", "\n4 20"))
    assert main(["compare", str(a), str(b)]) == 1
    assert "b lacks job(s) 3; a lacks job(s) 4" in capsys.readouterr().err


def test_module_entry_point_exit_codes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "vmsched.workloads", "check"]
    ok = subprocess.run([*cmd, str(LUBLIN)], capture_output=True, text=True)
    assert ok.returncode == 0 and "10000 job(s)" in ok.stdout
    bad = tmp_path / "bad.swf"
    bad.write_text("1 2 3\n")
    fail = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
    assert fail.returncode == 1 and f"{bad}:1: expected 18 fields, found 3" in fail.stderr
