"""The MPI application suite (vmsched/apps/): real runs under plain mpiexec, plus the pure helpers.

Every app runs at class S with each allowed count among 1, 2, 4 ranks; it must verify and give the
same checksum at every count. Bad arguments must fail fast with one clear message.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import REPO
from tests.plain_runs import MPIEXEC, mpirun, run_app
from vmsched.apps import classes, registry
from vmsched.apps.counterrng import block_index, uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.result import format_result, parse_result
from vmsched.apps.variants import heavy_ranks, parse_variant
from vmsched.vmruntime.shmclean import HYDRA_TOPOLOGY_PREFIX, job_files, remove_leftovers

# --- every app at class S: verified, and the checksum does not depend on the rank count ---------------


@pytest.mark.parametrize("app", list(registry.SPECS))
def test_class_s_verifies_with_same_checksum_at_1_2_4_ranks(app: str) -> None:
    counts = [n for n in (1, 2, 4) if registry.is_allowed(app, n)]
    assert counts == ([1, 4] if app == "btmz" else [1, 2, 4])
    results = [run_app(app, n) for n in counts]
    checksums = {r["ranks"]: r["checksum"] for r in results}
    assert len(set(checksums.values())) == 1, f"{app}: checksum depends on the rank count: {checksums}"


def test_odd_rank_counts_give_the_same_checksum() -> None:
    # 3 ranks: uneven blocks (ep), a 3 x 1 tile grid (sweep), an unpaired last rank (send).
    for app in ("ep", "sweep", "send"):
        assert run_app(app, 3)["checksum"] == run_app(app, 1)["checksum"], app  # n=1: cached from above


# --- the send family ------------------------------------------------------------------------------------


def test_send_variants_make_the_chosen_ranks_compute_k_times_longer() -> None:
    # Both ranks on CPU 0: a rank's CPU time is then measured on the same CPU as its partner's. On two (a VM's
    # two vCPUs), the light rank once read as many CPU seconds as the heavy one that computed 3 times as much
    # (0.2347 and 0.2421, 2026-12-06): the host ran its vCPU 3 times slower.
    balanced = run_app("send", 2, cpus="0", variant="0x1", iters=8)
    skewed = run_app("send", 2, cpus="0", variant="50x3", iters=8)
    assert balanced["info"]["heavy_ranks"] == [] and skewed["info"]["heavy_ranks"] == [1]
    light, heavy = skewed["info"]["compute_cpu_s"]
    assert heavy > 2.0 * light, skewed["info"]  # K = 3, measured as CPU time so folding cannot blur it
    b0, b1 = balanced["info"]["compute_cpu_s"]
    assert max(b0, b1) < 1.6 * min(b0, b1), balanced["info"]
    assert skewed["checksum"] == balanced["checksum"]  # the extra work repeats, it does not change the data


def test_send_runs_for_seconds_with_a_heavy_phase_timed_in_seconds() -> None:
    # The LBD's end-to-end tests size their phases so (tests/test_runtime_lbd.py): on a faster node a
    # phase counted in iterations ends before the detector's windows, which count CPU seconds, do.
    timed = run_app("send", 2, variant="50x3", seconds=0.6, heavy_s="0:0.3")
    info = timed["info"]
    assert timed["time"] >= 0.6, timed  # it ran its time ...
    iters = info["iters"]
    light, heavy = info["heavy_counts"]
    # ... and only rank 1 was heavy, for the first part of it, not all of it.
    assert light == 0 and 0 < heavy < iters, info
    assert info["heavy_s"] == [0, 0.3] and info["heavy_iters"] is None, info
    # The ranks agreed on the count of iterations, and the data are those of that many balanced ones.
    assert timed["checksum"] == run_app("send", 1, iters=iters)["checksum"]
    # The span in iterations, which the same test of a span decides: iterations 2, 3 and 4 of 8.
    spanned = run_app("send", 2, variant="50x3", iters=8, heavy_iters="2:5")
    assert spanned["info"]["heavy_counts"] == [0, 3] and spanned["info"]["heavy_iters"] == [2, 5], spanned["info"]


@pytest.mark.parametrize(("variant", "heavy"), [("50x2", [1, 3]), ("30x2", [3]), ("50x6", [1, 3])])
def test_send_variants_at_four_ranks(variant: str, heavy: list[int]) -> None:
    result = run_app("send", 4, variant=variant, iters=4)
    assert result["info"]["variant"] == variant
    assert result["info"]["heavy_ranks"] == heavy
    assert result["info"]["bad_messages"] == 0


def test_parse_variant() -> None:
    assert parse_variant("50x2") == (50, 2)
    assert parse_variant("0x1") == (0, 1)
    assert parse_variant("100x6") == (100, 6)
    for bad in ("50x", "x2", "50*2", "150x2", "0x3", "50x1", "50x0", "-5x2", " 50x2"):
        with pytest.raises(ValueError, match="bad variant"):
            parse_variant(bad)
    assert heavy_ranks(8, 50) == [1, 3, 5, 7]
    assert heavy_ranks(10, 30) == [3, 6, 9]
    assert heavy_ranks(4, 0) == []
    assert heavy_ranks(3, 100) == [0, 1, 2]


# --- ring / pingpong ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3])
def test_pingpong_and_ring_options(n: int) -> None:
    ping = run_app("ring", n, mode="pingpong", iters=500, size=1024)
    ring = run_app("ring", n, mode="ring", iters=500, size=1024)
    assert ping["info"]["mode"] == "pingpong" and ring["info"]["mode"] == "ring"
    assert ping["info"]["latency_us"] > 0 and ring["info"]["latency_us"] > 0
    assert ping["checksum"] != ring["checksum"]
    # checksums depend on mode, iters and size only
    assert run_app("ring", 2, mode="pingpong", iters=500, size=1024)["checksum"] == ping["checksum"]


# --- wrong arguments: one clear message, non-zero exit, no computation ---------------------------------


@pytest.mark.parametrize(
    ("n", "argv", "message"),
    [
        (
            3,
            ["-m", "vmsched.apps.cg", "--class", "B"],
            "cg needs a power-of-two number of ranks from 1 to 64; it was started with 3",
        ),
        (2, ["-m", "vmsched.apps.btmz", "-c", "B"], "btmz needs a perfect-square number of ranks"),
        (2, ["-m", "vmsched.apps.ep", "--class", "Q"], "unknown class 'Q' for ep; choose one of S, W, A, B"),
        (2, ["-m", "vmsched.apps.sweep", "--class", "B"], "unknown class 'B' for sweep"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--variant", "150x2"], "bad variant '150x2'"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--variant", "fast"], "bad variant 'fast'"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--seconds", "0"], "--seconds must be > 0, not 0.0"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--seconds", "9", "--iters", "9"], "exclude each other"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--heavy-s", "1:x"], "--heavy-s must be A:B (seconds)"),
        (2, ["-m", "vmsched.apps.send", "-c", "A", "--heavy-iters", "2:", "--heavy-s", "1:"], "exclude each other"),
        (2, ["-m", "vmsched.apps.ring", "-c", "A", "--mode", "star"], "unknown mode 'star'"),
        (2, ["-m", "vmsched.apps.ring", "-c", "A", "--size", "12"], "--size must be a multiple of 8"),
        (2, ["-m", "vmsched.apps.ft", "-c", "B", "--bogus"], "unrecognized arguments: --bogus"),
    ],  # fmt: skip
)
def test_wrong_arguments_fail_before_computing(n: int, argv: list[str], message: str) -> None:
    t = time.monotonic()
    proc = mpirun(n, [sys.executable, *argv], timeout=30)
    elapsed = time.monotonic() - t
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr  # rank 0 alone reports
    assert "VMAPP" not in proc.stdout
    assert elapsed < 10, f"took {elapsed:.1f} s: it computed (a class A/B run takes a minute or more)"


def test_failed_verification_exits_1_after_the_result_line(tmp_path: Path) -> None:
    script = tmp_path / "failing_app.py"
    script.write_text(
        textwrap.dedent(
            """
            from vmsched.apps import harness

            def kernel(ctx):
                ctx.comm.Barrier()
                return harness.Outcome(verified=ctx.rank != 1, checksum="x", info={})

            harness.main("ep", kernel)
            """
        )
    )
    proc = mpirun(2, [sys.executable, str(script)], timeout=30)
    assert proc.returncode == 1
    result = parse_result(proc.stdout)
    assert result["verified"] is False  # one rank's failure fails the whole run
    assert "verification FAILED" in proc.stderr


def test_an_exception_in_one_rank_aborts_the_job(tmp_path: Path) -> None:
    script = tmp_path / "crashing_app.py"
    script.write_text(
        textwrap.dedent(
            """
            from vmsched.apps import harness

            def kernel(ctx):
                if ctx.rank == 1:
                    raise RuntimeError("boom")
                ctx.comm.Barrier()  # rank 0 would wait here forever without the abort
                return harness.Outcome(True, "x")

            harness.main("ep", kernel)
            """
        )
    )
    # MPI_Abort leaves MPICH's /dev/shm segment and hydra's topology file in /tmp behind; like vmrun and
    # the launcher, note what the job maps and holds open while it runs and remove the rest afterwards,
    # so the test leaves nothing behind. (Only the job's own files: other jobs may run beside this test.)
    job = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable, str(script)], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    mapped: set[str] = set()
    deadline = time.monotonic() + 30
    while job.poll() is None and time.monotonic() < deadline:
        mapped |= job_files(job.pid)
        time.sleep(0.01)
    if job.poll() is None:
        job.kill()
    stdout, stderr = job.communicate()
    remove_leftovers(mapped)
    assert job.returncode != 0
    assert "RuntimeError: boom" in stderr
    assert "VMAPP" not in stdout
    assert [p for p in mapped if p.startswith(HYDRA_TOPOLOGY_PREFIX)], mapped  # its topology file was seen
    assert not [p for p in mapped if os.path.exists(p)]


# --- registry -------------------------------------------------------------------------------------------


def test_registry_allowed_counts() -> None:
    assert registry.allowed_counts("cg", 64) == [1, 2, 4, 8, 16, 32, 64]
    assert registry.allowed_counts("cg", 10) == [1, 2, 4, 8]
    assert registry.allowed_counts("btmz", 40) == [1, 4, 9, 16, 25, 36]
    assert registry.allowed_counts("ep", 5) == [1, 2, 3, 4, 5]
    assert registry.allowed_counts("ep", 1000)[-1] == 64
    assert registry.is_allowed("mg", 32) and not registry.is_allowed("mg", 12) and not registry.is_allowed("ep", 0)
    with pytest.raises(ValueError, match="unknown app 'nope'"):
        registry.allowed_counts("nope", 4)


def test_registry_command_and_names() -> None:
    argv = registry.command("send", "W", variant="50x2")
    assert argv == [sys.executable, "-m", "vmsched.apps.send", "--class", "W", "--variant", "50x2"]
    assert registry.command("ring", "S", mode="pingpong", iters=10)[-4:] == ["--mode", "pingpong", "--iters", "10"]
    with pytest.raises(ValueError, match="no class 'B'"):
        registry.command("sweep", "B")
    with pytest.raises(ValueError, match="no option 'variant'"):
        registry.command("cg", "S", variant="50x2")
    with pytest.raises(ValueError, match="bad variant"):
        registry.command("send", "S", variant="50x0")
    assert registry.split_name("send.50x2") == ("send", {"variant": "50x2"})
    assert registry.split_name("cg") == ("cg", {})
    assert registry.is_balanced("send") and registry.is_balanced("send.0x1") and registry.is_balanced("cg")
    assert not registry.is_balanced("send.50x2") and not registry.is_balanced("btmz")
    with pytest.raises(ValueError):
        registry.split_name("cg.50x2")


def test_every_app_has_sizes_for_its_classes() -> None:
    for name, spec in registry.SPECS.items():
        assert set(spec.classes) == set(classes.SIZES[name]), name
        works = [classes.work(name, c) for c in spec.classes]
        assert works == sorted(works) and len(set(works)) == len(works), f"{name}: classes must grow"
        assert spec.module == f"vmsched.apps.{name}" and (REPO / "vmsched" / "apps" / f"{name}.py").is_file()


# --- memory ---------------------------------------------------------------------------------------------

FAULTS_OF_TEMPORARIES = """
import resource, sys
import numpy as np
from vmsched.apps import harness
kept = harness.keep_freed_memory() if sys.argv[1] == "keep" else None
mib, count = int(sys.argv[2]), int(sys.argv[3])
x = np.ones(mib << 17)
def step():  # `count` temporaries of `mib` MiB live at once, then freed, as in one step of an app
    live = [x * float(i) for i in range(count)]
    del live
step()  # the first step faults its pages in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.parametrize(("mib", "count"), [(1, 8), (48, 2)], ids=["1MiB", "48MiB"])
def test_the_apps_keep_freed_memory_instead_of_faulting_it_in_again(mib: int, count: int) -> None:
    # By default glibc maps each temporary above 128 KiB (1 MiB: the apps' usual ones; 48 MiB: above
    # glibc's largest mmap threshold, as mg's and ft's class W arrays are) and hands it back when freed,
    # and the next step faults its pages in again. Kept, the steps after the first fault nothing. (ep
    # class S spent 2.4 of its 4.4 s in the kernel this way, mg and ft class W 10-12 of 9-13 s.)
    def faults(mode: str) -> tuple[str, int]:
        r = subprocess.run([sys.executable, "-c", FAULTS_OF_TEMPORARIES, mode, str(mib), str(count)], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        kept, n = r.stdout.split()
        return kept, int(n)

    kept, n = faults("keep")
    assert kept == "True" and n < 100, (kept, n)
    # The measurement sees the faults it is about: one per 2-MiB page at least (NumPy asks for huge pages).
    assert faults("default")[1] >= 20 * count * max(1, mib // 2)


# --- result line ----------------------------------------------------------------------------------------


def test_result_line_round_trip_and_errors() -> None:
    result = {"app": "ep", "class": "S", "ranks": 4, "time": 1.5, "mpi_time": 0.1, "mpi_pct": 6.7,
              "verified": True, "checksum": "abc", "info": {"k": [1, 2]}}  # fmt: skip
    line = format_result(result)
    assert line.startswith("VMAPP {") and "\n" not in line
    assert parse_result(f"noise\n{line}\nmore noise\n") == result
    with pytest.raises(ValueError, match="found 0"):
        parse_result("no result here")
    with pytest.raises(ValueError, match="found 2"):
        parse_result(f"{line}\n{line}")
    with pytest.raises(ValueError, match="malformed"):
        parse_result("VMAPP {not json")
    with pytest.raises(ValueError, match="lacks keys"):
        parse_result('VMAPP {"app": "ep"}')
    with pytest.raises(ValueError, match="lacks keys"):
        format_result({"app": "ep"})


# --- the building blocks of rank-independent checksums --------------------------------------------------


def test_repro_sums_do_not_depend_on_order_or_split() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal(100_000) * np.exp(rng.uniform(-30, 30, 100_000))
    total = repro_sums(None, [x])[0]
    assert math.isclose(total, math.fsum(x), rel_tol=0, abs_tol=1e-15 * float(np.abs(x).max()))
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(x)
        parts = np.array_split(perm, 7)
        # rank-style: digit sums per part, added as integers, give the same bits
        e = math.frexp(float(np.abs(x).max()))[1]
        from vmsched.apps.exactsum import digit_sums, digits_value

        digits = sum(digit_sums(p, e) for p in parts)
        assert digits_value(digits.tolist(), e) == total
        assert repro_sums(None, [perm])[0] == total
    assert repro_sums(None, [np.zeros(5), np.array([1.0, np.nan]), np.array([])]) == [
        0.0,
        pytest.approx(math.nan, nan_ok=True),
        0.0,
    ]


def test_counter_rng_is_decomposition_independent() -> None:
    whole = uniform(3, block_index((6, 5, 4), (0, 0, 0), (6, 5, 4)))
    part = uniform(3, block_index((6, 5, 4), (2, 1, 0), (4, 5, 3)))
    assert np.array_equal(whole.reshape(6, 5, 4)[2:4, 1:5, 0:3], part)
    assert 0.0 <= whole.min() and whole.max() < 1.0
    assert not np.array_equal(uniform(3, np.arange(10)), uniform(4, np.arange(10)))
    assert checksum_of([1.0, 2, "x"]) == checksum_of([1.0, 2, "x"]) != checksum_of([1.0 + 2**-52, 2, "x"])


# --- the measurement table ------------------------------------------------------------------------------


def test_measure_table_estimates_classifies_and_flags_mismatches(tmp_path: Path) -> None:
    from vmsched.apps import measure

    def res(name: str, cls: str, n: int, t: float, checksum: str = "c") -> dict[str, Any]:
        return {"name": name, "class": cls, "ranks": n, "time": t, "mpi_pct": 10.0 * n, "verified": True,
                "checksum": checksum}  # fmt: skip

    results = [res("ep", "W", 1, 12.0), res("ep", "W", 2, 5.0), res("ep", "W", 4, 4.0, "other")]
    results += [res("btmz", "W", 1, 30.0), res("btmz", "W", 4, 9.0), res("send.50x2", "W", 1, 1.0)]
    command = "python -m vmsched.apps.measure x"
    text = measure.table(results, ["ep", "btmz", "send.50x2"], ["W"], ["A"], [1, 2, 4], command)
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in text.splitlines()}
    assert "MISMATCH" in rows[("ep", "W")] and "| short |" in rows[("ep", "W")]
    ratio = classes.work("ep", "A") / classes.work("ep", "W")
    assert f"~{12.0 * ratio:.1f}" in rows[("ep", "A")] and "| long |" in rows[("ep", "A")]
    assert "| n/a |" in rows[("btmz", "W")] and "| medium |" in rows[("btmz", "W")]
    assert "| no |" in rows[("send.50x2", "W")]
    out = tmp_path / "README.md"
    out.write_text(f"intro\n{measure.START}\nold\n{measure.END}\noutro\n")
    measure.write_out(out, text)
    assert out.read_text() == f"intro\n{measure.START}\n{text}{measure.END}\noutro\n"
