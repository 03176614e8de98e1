"""Build the SPANK plugin (`spank_vmsched.so`) against the installed `slurm/spank.h`.

Console script: `vmslurm-build [--out PATH] [--print-path] [--plugstack CONFIG]`. Root runs it once per
node (or once on a shared installation); `--plugstack CONFIG` prints the plugstack.conf line that loads
the plugin with this installation's helper (`vmslurm-step`) and the node's vmsched config (`%n` = node
name). The plugin needs no MPI, so it is compiled with the system C compiler ($CC, else cc), not mpicc.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE = PACKAGE_DIR / "spank_vmsched.c"
CFLAGS = ("-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Wno-unused-parameter")


class BuildError(RuntimeError):
    """The plugin cannot be built; the message carries the compiler's output."""


def default_output() -> Path:
    """Inside the installation, where slurmd (root) loads it; readable by all."""
    return PACKAGE_DIR / "_build" / "spank_vmsched.so"


def helper_path() -> Path:
    """The `vmslurm-step` of this installation (next to its interpreter)."""
    return Path(sys.executable).parent / "vmslurm-step"


def plugstack_line(plugin: Path, config: str) -> str:
    return f"required {plugin} helper={helper_path()} config={config}"


def build(out: Path | None = None) -> Path:
    target = out or default_output()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler found (install gcc, or set CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        so = Path(tmp) / target.name
        cmd = [cc, *CFLAGS, str(SOURCE), "-o", str(so)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            hint = "" if Path("/usr/include/slurm/spank.h").exists() else " (spank.h missing: install libslurm-dev)"
            raise BuildError(f"compiling the SPANK plugin failed{hint} ({' '.join(cmd)}):\n{res.stdout}{res.stderr}")
        so.chmod(0o755)
        os.replace(so, target)  # slurmd never loads half a plugin
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vmslurm-build", description="Build vmsched's SPANK plugin for Slurm")
    p.add_argument("--out", type=Path, help=f"where to put it (default {default_output()})")
    p.add_argument("--print-path", action="store_true", help="print only the plugin's path")
    p.add_argument("--plugstack", metavar="CONFIG", help="print the plugstack.conf line for this node config path")
    args = p.parse_args(argv)
    try:
        path = build(args.out)
    except BuildError as e:
        print(f"vmslurm-build: {e}", file=sys.stderr)
        return 1
    if args.plugstack:
        print(plugstack_line(path, args.plugstack))
    else:
        print(path if args.print_path else f"vmslurm-build: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
