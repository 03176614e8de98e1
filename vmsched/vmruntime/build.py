"""Build `libvmrt.so`, the PMPI interposition library, with the `mpicc` of the environment.

The shared-memory header is generated from `vmsched.cpumanager.shm_layout` at build time, so the C code and
the CPU manager read one definition. Builds are cached by a hash of everything that goes into them
(sources, generated header, compiler command), so `library_path()` is cheap after the first call and a
changed layout can never be paired with a stale library.

Console script: `vmrt-build [--force] [--print-path]`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vmsched.cpumanager.shm_layout import c_header

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCES = ("libvmrt.c", "wrappers.c")
HEADERS = ("vmrt.h",)
CFLAGS = ("-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=default")
LIBS = ("-ldl", "-lpthread")
KEEP_OLD_BUILDS = 3


class BuildError(RuntimeError):
    """The library cannot be built; the message carries the compiler's output."""


def mpicc() -> Path:
    """The `mpicc` next to this interpreter (the mpich wheel's), else the one on PATH."""
    local = Path(sys.executable).parent / "mpicc"
    if local.exists():
        return local
    found = shutil.which("mpicc")
    if not found:
        raise BuildError("no mpicc found (install the 'mpich' package into this environment)")
    return Path(found)


def build_dir() -> Path:
    """`vmsched/vmruntime/_build` (inside the installation, loadable by every user's ranks) when the
    package dir is writable, else a per-user cache directory."""
    override = os.environ.get("VMRT_BUILD_DIR")
    if override:
        return Path(override)
    if os.access(PACKAGE_DIR, os.W_OK):
        return PACKAGE_DIR / "_build"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "vmsched" / "vmrt"


def _fingerprint(cc: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode() + b"\0" + (PACKAGE_DIR / name).read_bytes())
    h.update(c_header().encode())
    h.update(" ".join((str(cc),) + CFLAGS + LIBS).encode())
    return h.hexdigest()[:16]


def build(force: bool = False) -> Path:
    """Compile (unless an identical build exists) and return the library's path."""
    cc = mpicc()
    out_dir = build_dir()
    target = out_dir / f"libvmrt-{_fingerprint(cc)}.so"
    if target.exists() and not force:
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    shared = out_dir == PACKAGE_DIR / "_build"
    if shared:
        # Built by root into the installation (vmrt-build, or the launcher at first use): the ranks of
        # every user load it, whatever umask the builder had.
        out_dir.chmod(0o755)
    # Compile in a private directory and rename: concurrent builders never see half a library.
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        work = Path(tmp)
        (work / "vm_shm.h").write_text(c_header())
        for name in SOURCES + HEADERS:
            shutil.copy2(PACKAGE_DIR / name, work / name)
        cmd = [str(cc), *CFLAGS, "-I", str(work), *(str(work / s) for s in SOURCES), "-o",
               str(work / "libvmrt.so"), *LIBS]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(f"compiling libvmrt failed ({' '.join(cmd)}):\n{res.stdout}{res.stderr}")
        shutil.copy2(work / "vm_shm.h", out_dir / "vm_shm.h")
        (work / "libvmrt.so").chmod(0o755)
        os.replace(work / "libvmrt.so", target)
    # Keep the directory small, but not too eagerly: a job being started may still name an older build.
    older = sorted((p for p in out_dir.glob("libvmrt-*.so") if p != target), key=lambda p: p.stat().st_mtime)
    for old in older[:-KEEP_OLD_BUILDS]:
        old.unlink(missing_ok=True)
    return target


def library_path() -> Path:
    """Path of the current library, building it first if needed ($VMRT_LIBRARY overrides)."""
    override = os.environ.get("VMRT_LIBRARY")
    if override:
        return Path(override)
    return build()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmrt-build", description="Build the vmsched runtime library (libvmrt.so)")
    p.add_argument("--force", action="store_true", help="rebuild even if an identical build exists")
    p.add_argument("--print-path", action="store_true", help="print only the library's path")
    args = p.parse_args(argv)
    try:
        path = build(force=args.force)
    except BuildError as e:
        print(f"vmrt-build: {e}", file=sys.stderr)
        return 1
    print(path if args.print_path else f"vmrt-build: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
