"""vmruntime: the library builds, its shared-memory header matches the ctypes layout, and its
wrappers really intercept the calls of mpi4py and of a native C program (no CPU manager needed)."""

from __future__ import annotations

import ctypes as C
import json
import subprocess
from pathlib import Path

import pytest

from vmsched.cpumanager import shm_layout as L
from vmsched.vmruntime import build
from vmsched.vmruntime.testing import compile_c_program, mpiexec, read_stats, selftest_cmd

STRUCTS = L.ALL_C_STRUCTS


@pytest.fixture(scope="module")
def lib() -> Path:
    return build.library_path()


def test_header_matches_ctypes_layout(tmp_path: Path) -> None:
    """Compile a C program against the generated header; every size and offset must agree."""
    (tmp_path / "vm_shm.h").write_text(L.c_header())
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "vm_shm.h"', "int main(void) {"]
    expected = {}
    for cname, struct in STRUCTS.items():
        lines.append(f'    printf("{cname} %zu\\n", sizeof({cname}));')
        expected[cname] = C.sizeof(struct)
        for fname, _ in struct._fields_:
            lines.append(f'    printf("{cname}.{fname} %zu\\n", offsetof({cname}, {fname}));')
            expected[f"{cname}.{fname}"] = getattr(struct, fname).offset
    lines += ["    return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")], check=True)
    out = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    got = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert got == expected
    assert got["vm_segment"] == L.segment_size()


def test_build_is_cached_and_exports_wrappers(lib: Path) -> None:
    assert lib.exists()
    assert build.library_path() == lib  # second call: same cached file, no rebuild
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    for name in ("MPI_Recv", "MPI_Recv_c", "MPI_Send_c", "MPI_Mprobe", "MPI_Mrecv_c", "MPI_Waitall", "MPI_Barrier",
                 "MPI_Allreduce_c", "MPI_Sendrecv", "MPI_Init_thread", "MPI_Finalize", "sched_yield"):  # fmt: skip
        assert f" T {name}\n" in syms, name


def test_build_main_prints_path(capsys: pytest.CaptureFixture[str], lib: Path) -> None:
    assert build.main(["--print-path"]) == 0
    assert capsys.readouterr().out.strip() == str(lib)


def _run_plain(cmd: list[str], nranks: int, lib: Path | None, stats: Path) -> subprocess.CompletedProcess[str]:
    env_args = ["-genv", "VMRT_STATS", str(stats)]
    if lib is not None:
        env_args += ["-genv", "LD_PRELOAD", str(lib)]
    return subprocess.run([mpiexec(), "-n", str(nranks), *env_args, *cmd], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_mpi4py_calls_are_intercepted(lib: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.jsonl"
    res = _run_plain(selftest_cmd("coll", "--iters", "3"), 2, lib, stats)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["ok"]
    ranks = read_stats(stats)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        calls = r["calls"]
        assert r["mode"] == "plain" and r["mpi_calls"] > 50
        # mpi4py 4 uses the large-count variants and matched probes: all of them must be seen.
        for name in ("Init_thread", "Finalize", "Allreduce_c", "Barrier", "Mprobe", "Mrecv_c", "Send_c",
                     "Waitall", "Sendrecv_replace_c", "Probe", "Alltoall_c", "Scan_c", "Waitany", "Isend_c",
                     "Irecv_c"):  # fmt: skip
            assert calls.get(name, 0) > 0, (name, calls)


def test_c_program_calls_are_intercepted_exactly(lib: Path, tmp_path: Path) -> None:
    exe = compile_c_program(Path(__file__).parent / "c" / "ring.c", tmp_path)
    stats = tmp_path / "stats.jsonl"
    laps = 25
    res = _run_plain([str(exe), str(laps)], 3, lib, stats)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"ring ok {laps * 6}"
    for r in read_stats(stats):
        # Every call the program makes is counted, exactly.
        assert r["calls"]["Send"] == laps and r["calls"]["Recv"] == laps
        assert r["calls"]["Allreduce"] == 2 and r["calls"]["Bcast"] == 1 and r["calls"]["Barrier"] == 1
        assert r["calls"]["Init"] == 1 and r["calls"]["Finalize"] == 1


def test_without_preload_nothing_is_counted(tmp_path: Path) -> None:
    """The negative control: the interposition checks above would notice a bypassed library."""
    exe = compile_c_program(Path(__file__).parent / "c" / "ring.c", tmp_path)
    stats = tmp_path / "stats.jsonl"
    res = _run_plain([str(exe), "3"], 2, None, stats)
    assert res.returncode == 0, res.stderr
    assert not stats.exists()
