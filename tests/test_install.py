"""One installed namespace: everything the project installs lives under `vmsched`.

A static check that no module imports (or names, in a `python -m X` string or a doc) a top-level name of
this project other than `vmsched`; and the real thing: the project built as a wheel, installed into a
fresh virtual environment in a temporary directory, run from there (outside the source tree) — a folded
4-rank job with `vmrun` under a CPU manager, and a job submitted with `vmsubmit` through the launcher by a
second user, whose ranks load the runtime library that root built inside the installation.
"""

from __future__ import annotations

import ast
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, CpuManagerProcess
from tests.launcher_harness import Node
from vmsched.apps.result import parse_result
from vmsched.vmruntime.testing import read_stats

# The top-level packages of earlier releases (before everything moved under `vmsched.`).
FORMER = ("apps", "cpumanager", "launcher", "vmruntime", "workloads")
TEXT_SUFFIXES = {".py", ".md", ".cfg", ".toml", ".service", ".txt", ".swf", ".c", ".h"}


def project_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored files of the checkout (what a commit would hold)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, check=True).stdout  # fmt: skip
    return [REPO / name for name in out.decode().split("\0") if name and (REPO / name).is_file()]


def project_top_level_names(files: list[Path]) -> set[str]:
    """Names under which a module of this checkout could be imported when its root is on sys.path:
    its top-level folders and .py files, plus the former top-level packages."""
    names = set(FORMER)
    for f in files:
        rel = f.relative_to(REPO)
        if rel.suffix == ".py":
            names.add(rel.parts[0] if len(rel.parts) > 1 else rel.stem)
    return names


def foreign_imports(path: Path, source: str, forbidden: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.relative_to(REPO)}:{node.lineno}: imports {n}" for n in names
                  if n.split(".")[0] in forbidden]  # fmt: skip
    return found


def submodules(package: str) -> set[str]:
    d = REPO / "vmsched" / package
    return {p.stem for p in d.glob("*.py")} | {p.name for p in d.iterdir() if (p / "__init__.py").exists()}


# `launcher.shim`, `python -m apps.cg`, "apps.{name}": a dotted module path that starts with a former
# top-level name. Not `cfg.launcher.policy` (an attribute), `vm-launcher.service` or `launcher.call(...)`.
DOTTED = re.compile(r"(?<![\w./-])(" + "|".join(FORMER) + r")\.(?:(\w+)(?![\w(])|\{)")


def former_module_references(path: Path, text: str) -> list[str]:
    known = {p: submodules(p) for p in FORMER}
    return [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: names {m.group(0)}"
            for m in DOTTED.finditer(text) if m.group(2) is None or m.group(2) in known[m.group(1)]]  # fmt: skip


def test_no_module_imports_a_top_level_name_of_this_project_other_than_vmsched() -> None:
    files = project_files()
    names = project_top_level_names(files)
    assert {"vmsched", "tests", *FORMER} <= names
    problems: list[str] = []
    for f in files:
        if f.suffix not in TEXT_SUFFIXES:
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".py":
            # Test modules may import their own helpers (tests.conftest), and benchmarks, which run from a
            # checkout too, the tests' reference implementations (bench/vmsim_speed.py's baseline is the
            # tests' textbook EASY); nothing installed may.
            top = f.relative_to(REPO).parts[0]
            allowed = {"vmsched", "tests"} if top in ("tests", "bench") else {"vmsched"}
            problems += foreign_imports(f, text, names - allowed)
        if f != Path(__file__).resolve():  # this file spells the patterns out to test the check
            problems += former_module_references(f, text)
    assert not problems, "\n".join(problems)


def test_the_import_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The checks above are not vacuous: each pattern they must catch is caught."""
    fake = REPO / "vmsched" / "fake_module_for_test.py"
    src = "import launcher.shim\nfrom apps import cg\nfrom vmsched.apps import cg\nimport tests.conftest\n"
    assert [p.split(": ")[1] for p in foreign_imports(fake, src, {"launcher", "apps", "tests"})] == [
        "imports launcher.shim", "imports apps", "imports tests.conftest"]  # fmt: skip
    text = ('cmd = [sys.executable, "-m", "launcher.shim"]\nf"apps.{name}"\ncfg.launcher.policy\n'
            'launcher.call("queue")\n"vm-launcher.service"\n"cpumanager.sock"\n'
            'python -m vmsched.apps.cg\n')  # fmt: skip
    assert [p.split(": ")[1] for p in former_module_references(fake, text)] == [
        "names launcher.shim", "names apps.{"]  # fmt: skip


# --- The wheel, installed into a fresh virtual environment ------------------------------------------------


class Installed:
    """A fresh virtual environment with the project's wheel, in a world-readable temporary directory
    (a second user runs a job from it), used from a working directory outside the source tree."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.bin = self.venv / "bin"
        self.work = root / "work"
        self.wheel: Path | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a user of that installation has: its bin first, nothing of this checkout."""
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        outer = str(Path(sys.executable).parent)
        path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != outer]
        env["PATH"] = os.pathsep.join([str(self.bin), *path])
        return {**env, **extra}

    def run(self, *argv: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
        exe = argv[0] if "/" in argv[0] else str(self.bin / argv[0])
        kw.setdefault("env", self.env())
        return subprocess.run([exe, *argv[1:]], cwd=self.work, capture_output=True, text=True, timeout=timeout, **kw)


def python_for_every_user() -> str:
    """A Python (>= 3.11) that another user can run, to base the virtual environment on: a site installs
    vmsched for all its users. The interpreter of this test run may live under root's home (pyenv)."""
    nobody = pwd.getpwnam("nobody")
    tried = []
    for cand in (sys._base_executable, sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not cand or cand in tried:
            continue
        tried.append(cand)
        check = "import sys, venv; sys.exit(sys.version_info < (3, 11))"
        try:
            r = subprocess.run([cand, "-c", check], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[],
                               capture_output=True, timeout=30, cwd="/")  # fmt: skip
        except PermissionError:  # under a home directory only its owner may enter
            continue
        if r.returncode == 0:
            return cand
    pytest.fail(f"no Python >= 3.11 that user nobody can run (tried {tried}); install python3 (Debian)")


def pip(*args: str, cwd: Path) -> None:
    r = subprocess.run([*args, "--disable-pip-version-check"], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="vmsched-wheel-"))
    try:
        root.chmod(0o755)
        inst = Installed(root)
        inst.work.mkdir()
        inst.work.chmod(0o1777)
        # Build from a copy of the checkout, so that the build leaves nothing (build/, *.egg-info) in it.
        src = root / "src"
        for f in project_files():
            dest = src / f.relative_to(REPO)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
        pip(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(src), cwd=root)
        (inst.wheel,) = (root / "dist").glob("vmsched-*.whl")
        shutil.rmtree(src)
        subprocess.run([python_for_every_user(), "-m", "venv", "--without-pip", str(inst.venv)], check=True,
                       timeout=120)  # fmt: skip
        # --no-compile: byte-compiling numpy and the rest took seconds of the suite, and checks nothing here.
        pip(sys.executable, "-m", "pip", "--python", str(inst.bin / "python"), "install", "-q", "--no-compile",
            str(inst.wheel), cwd=inst.work)  # fmt: skip
        yield inst
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_wheel_installs_only_the_vmsched_namespace(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = whl.namelist()
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert whl.read(info).decode().split() == ["vmsched"]
    outside = [n for n in names if n.split("/")[0] != "vmsched" and not n.split("/")[0].endswith(".dist-info")]
    assert not outside, f"the wheel installs files outside vmsched/: {outside}"
    for needed in ("vmsched/vmruntime/libvmrt.c", "vmsched/vmruntime/wrappers.c", "vmsched/vmruntime/vmrt.h",
                   "vmsched/apps/cg.py", "vmsched/workloads/examples/hc/template.txt",
                   "vmsched/slurm/spank_vmsched.c"):  # fmt: skip
        assert needed in names
    code = f"import importlib.util as u, vmsched; print(vmsched.__file__); print([u.find_spec(n) for n in {FORMER}])"
    r = installed.run("python", "-c", code)
    assert r.returncode == 0, r.stderr
    where, former = r.stdout.splitlines()
    assert Path(where).is_relative_to(installed.venv), f"vmsched imported from {where}, not the installation"
    assert former == str([None] * len(FORMER)), f"a former top-level name is importable: {former}"


def test_the_slurm_plugin_builds_from_the_wheel(installed: Installed) -> None:
    """Root builds the SPANK plugin inside the installation and gets the plugstack.conf line naming the
    installation's helper (docs/slurm.md)."""
    r = installed.run("vmslurm-build", "--plugstack", "/etc/vmsched/%n.toml")
    assert r.returncode == 0, r.stderr
    _, plugin, helper, config = r.stdout.split()
    assert Path(plugin).is_relative_to(installed.venv) and Path(plugin).exists()
    assert helper == f"helper={installed.bin / 'vmslurm-step'}" and config == "config=/etc/vmsched/%n.toml"
    assert (installed.bin / "vmslurm-step").exists()


def test_vmrun_of_a_folded_job_from_the_wheel(installed: Installed) -> None:
    built = installed.run("vmrt-build", "--print-path")
    assert built.returncode == 0, built.stderr
    lib = Path(built.stdout.strip())
    site = installed.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert lib.parent == site / "vmsched" / "vmruntime" / "_build", lib
    for p in (lib, lib.parent):  # every user's ranks can load it
        assert stat.S_IMODE(p.stat().st_mode) & 0o005 == 0o005, f"{p} is not readable by other users"

    state = installed.root / "vmrun-state"
    cm = CpuManagerProcess(state, "0", bin_dir=installed.bin, env=installed.env(), cwd=installed.work).start()
    try:
        app = ["python", "-m", "vmsched.apps.cg", "-c", "S"]
        plain = installed.run("mpiexec", "-n", "1", *app)
        assert plain.returncode == 0, plain.stderr
        stats = installed.root / "stats.jsonl"
        folded = installed.run("vmrun", "--state-dir", str(state), "-n", "4", "--max-mpl", "4", "--", *app,
                               env=installed.env(VMRT_STATS=str(stats)))  # fmt: skip
        assert folded.returncode == 0, folded.stdout[-2000:] + folded.stderr[-2000:]
        res, ref = parse_result(folded.stdout), parse_result(plain.stdout)
        assert res["verified"] is True and res["ranks"] == 4
        assert res["checksum"] == ref["checksum"]
        assert " mpl=4\n" in cm.cfg.cpumanager_log.read_text(), "the job did not run folded on the one CPU"
        # Every rank loaded the installation's runtime (it writes these lines) and took turns on the CPU.
        ranks = read_stats(stats)
        assert sorted(s["rank"] for s in ranks) == [0, 1, 2, 3], ranks
        assert sum(s["ctx_switches"] for s in ranks) > 0
    finally:
        assert cm.stop() == 0


def test_launcher_job_of_another_user_from_the_wheel(installed: Installed) -> None:
    nobody = pwd.getpwnam("nobody")
    # The job's ranks write VMRT_STATS lines only if they loaded the runtime library that root built.
    stats = installed.work / "stats.jsonl"
    node = Node("fcfs/fifo", cpus="0", bin_dir=installed.bin, base_env=installed.env(VMRT_STATS=str(stats)))
    try:
        node.start()
        # A second user submits a 4-rank job; the launcher (root) folds it onto the one CPU.
        job = node.submit("-n", "4", "--max-mpl", "4", "--time", "2m", "--",
                          "python", "-m", "vmsched.apps.ep", "-c", "S", user=nobody.pw_uid)  # fmt: skip
        row = node.wait_all_done(timeout=180)[job]
        out = node.work / f"vmsched-{job}.out"
        assert row["state"] == "completed" and row["user"] == "nobody", (row, out.read_text()[-2000:])
        assert out.stat().st_uid == nobody.pw_uid, "the job must run as the user who submitted it"
        res = parse_result(out.read_text())
        assert res["verified"] is True and res["ranks"] == 4
        assert " mpl=4\n" in node.cfg.cpumanager_log.read_text(), "the job did not run folded on the one CPU"
        ranks = read_stats(stats)
        assert sorted(s["rank"] for s in ranks) == [0, 1, 2, 3], ranks
        assert {s["job"] for s in ranks} == {job}
        # As that user, the ranks opened their job's own segment and ran folded under the token protocol;
        # the root manager verified each of them (none was ignored).
        assert {s["mode"] for s in ranks} == {"ctl"}, ranks
        assert "ignoring pid" not in node.cfg.cpumanager_log.read_text()
    finally:
        node.stop()
