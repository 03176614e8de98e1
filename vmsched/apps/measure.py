"""Measure the app suite and write the markdown table for vmsched/apps/README.md.

    python -m vmsched.apps.measure --classes S W --ranks 1 2 4 --estimate A \
        --out vmsched/apps/README.md --log measure.jsonl

Runs every app (default: all, plus send.50x2) at every class and allowed rank count under plain
mpiexec, one run at a time, and prints progress on stderr. Classes given with --estimate are not run:
their times are the measured times of the largest measured class scaled by the work ratio of
vmsched.apps.classes.work (marked "~"). When --out already contains the markers below, only the text between
them is replaced; otherwise the file is overwritten with the table.

Long/short follows the thesis's rule (sequential run time > 30 min long, < 10 min short) scaled down by
SCALE = 30 for this machine: 1-rank time > 60 s long, < 20 s short, otherwise "medium".
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vmsched.apps import classes, registry
from vmsched.apps.result import parse_result

START, END = "<!-- measured-table:start -->", "<!-- measured-table:end -->"
SCALE = 30.0
LONG_S, SHORT_S = 30 * 60 / SCALE, 10 * 60 / SCALE
DEFAULT_APPS = ["ep", "cg", "mg", "ft", "sweep", "btmz", "send", "send.50x2", "ring"]


def mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


def run_best(name: str, cls: str, n: int, timeout: float, repeat: int) -> dict[str, Any]:
    """The run with the shortest time out of `repeat` (the least disturbed on a shared machine)."""
    runs = [run_one(name, cls, n, timeout) for _ in range(repeat)]
    bad = [r for r in runs if "error" in r or not r["verified"]]
    if bad:
        return bad[0]
    best = min(runs, key=lambda r: r["time"])
    best["times"] = [r["time"] for r in runs]
    return best


def run_one(name: str, cls: str, n: int, timeout: float) -> dict[str, Any]:
    app, opts = registry.split_name(name)
    argv = [mpiexec(), "-n", str(n), *registry.command(app, cls, **opts)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "class": cls, "ranks": n, "error": f"timeout after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    try:
        result = parse_result(proc.stdout)
    except ValueError as exc:
        return {"name": name, "class": cls, "ranks": n, "error": f"rc={proc.returncode}: {exc}: {proc.stderr[-300:]}"}
    result.update(name=name, wall=round(wall, 3), rc=proc.returncode)
    return result


def classify(seq_time: float) -> str:
    if seq_time > LONG_S:
        return "long"
    return "short" if seq_time < SHORT_S else "medium"


def _fmt(t: float | None, estimated: bool = False) -> str:
    if t is None:
        return "—"
    return ("~" if estimated else "") + (f"{t:.2f}" if t < 10 else f"{t:.1f}")


def table(results: list[dict[str, Any]], names: list[str], measured: list[str], estimated: list[str],
          ranks: list[int], command: str, repeat: int = 1) -> str:  # fmt: skip
    by = {(r["name"], r["class"], r["ranks"]): r for r in results}
    mpi_ranks = [n for n in ranks if n > 1]
    head = ["app", "class", *[f"t({n}) s" for n in ranks], *[f"MPI % ({n})" for n in mpi_ranks],
            "comm.", "balanced", "type", "checks"]  # fmt: skip
    lines = [
        f"Command: `{command}`",
        "",
        f"Times are the app's timed section (max over ranks), seconds. `~` = estimated from class "
        f"{measured[-1]} by the work ratio, not run. MPI % = mean over ranks of the time inside MPI calls. "
        f"Fastest of {repeat} run(s) per cell. "
        f"type: 1-rank time > {LONG_S:.0f} s long, < {SHORT_S:.0f} s short (thesis rule / {SCALE:.0f}).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name in names:
        app, _ = registry.split_name(name)
        spec = registry.get_spec(app)
        for cls in [c for c in measured + estimated if c in spec.classes]:
            est = cls in estimated
            cells, mpis, checks = [], [], []
            for n in ranks:
                base = measured[-1] if est else cls
                r = by.get((name, base, n))
                if not spec.allowed(n):
                    cells.append("n/a")
                    continue
                if r is None or "error" in r:
                    cells.append("FAIL" if r else "—")
                    continue
                t = r["time"] * (classes.work(app, cls) / classes.work(app, base) if est else 1.0)
                cells.append(_fmt(t, est))
                if not est:
                    checks.append(r["checksum"] if r["verified"] else "unverified")
            for n in mpi_ranks:
                r = by.get((name, cls, n))
                mpis.append(f"{r['mpi_pct']:.0f}" if r and "error" not in r and not est else "—")
            seq = by.get((name, measured[-1] if est else cls, 1))
            kind = "—"
            if seq and "error" not in seq:
                scale = classes.work(app, cls) / classes.work(app, measured[-1]) if est else 1.0
                kind = classify(seq["time"] * scale)
            check = "—" if est else ("same checksum" if len(set(checks)) == 1 else "MISMATCH " + ",".join(checks))
            balanced = "yes" if registry.is_balanced(name) else "no"
            lines.append("| " + " | ".join([name, cls, *cells, *mpis, spec.comm_degree, balanced, kind, check]) + " |")
    return "\n".join(lines) + "\n"


def write_out(path: Path, text: str) -> None:
    if path.exists():
        old = path.read_text()
        if START in old and END in old:
            head, rest = old.split(START, 1)
            _, tail = rest.split(END, 1)
            path.write_text(f"{head}{START}\n{text}{END}{tail}")
            return
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vmsched.apps.measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", nargs="+", default=DEFAULT_APPS, help="app names (send.PCTxK allowed)")
    ap.add_argument("--classes", nargs="+", default=["S", "W"], help="classes to run")
    ap.add_argument("--estimate", nargs="*", default=[], help="classes to estimate from the last measured one")
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--out", type=Path, help="markdown file to write (or update between the markers)")
    ap.add_argument("--log", type=Path, help="append every result as one JSON line")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell; the fastest is reported")
    args = ap.parse_args(argv)
    for name in args.apps:
        registry.split_name(name)  # fails early on a bad name
    command = "python -m vmsched.apps.measure " + shlex.join(sys.argv[1:] if argv is None else argv)
    plan = [
        (name, cls, n)
        for cls in args.classes
        for name in args.apps
        for n in args.ranks
        if cls in registry.get_spec(registry.split_name(name)[0]).classes
        and registry.is_allowed(registry.split_name(name)[0], n)
    ]
    results = []
    failed = 0
    for k, (name, cls, n) in enumerate(plan, 1):
        r = run_best(name, cls, n, args.timeout, args.repeat)
        results.append(r)
        ok = "error" not in r and r["verified"]
        failed += not ok
        status = f"{r['time']:.2f} s, MPI {r['mpi_pct']:.0f} %" if "error" not in r else r["error"]
        print(f"[{k}/{len(plan)}] {name} {cls} n={n}: {status}{'' if ok else '  FAILED'}", file=sys.stderr, flush=True)
        if args.log:
            with args.log.open("a") as f:
                f.write(json.dumps(r) + "\n")
    text = table(results, args.apps, args.classes, args.estimate, args.ranks, command, args.repeat)
    if args.out:
        write_out(args.out, text)
    else:
        print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
