"""``vmworkload``: check, characterize, generate, measure and compare workloads.

Exit codes: 0 success, 1 bad input (a file that cannot be read or is malformed), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from vmsched.workloads import catalog, mixes
from vmsched.workloads.characterize import DEFAULT_THRESHOLD, characterize
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.generate import GeneratedWorkload, WorkloadSpec, generate, mix_by_class, mix_from_weights
from vmsched.workloads.jsonable import to_jsonable
from vmsched.workloads.metrics import (
    DEFAULT_TAUS,
    DEFAULT_TOLERANCE,
    records_from_swf,
    relative_performance,
    segments_from_records,
    summarize,
)
from vmsched.workloads.params import TRACE_FILE, job_requests, read_params_dir
from vmsched.workloads.report import (
    TextTable,
    characterization_tables,
    markdown,
    relative_tables,
    summary_tables,
)
from vmsched.workloads.swf import Blank, Comment, format_swf, machine_size, read_swf

PROG = "vmworkload"


class UsageError(Exception):
    """A command line that makes no sense (exit code 2)."""


def _print_tables(tables: Sequence[TextTable], as_markdown: bool) -> None:
    if as_markdown:
        sys.stdout.write(markdown(tables))
        return
    console = Console() if sys.stdout.isatty() else Console(width=200)
    for table in tables:
        console.print(table.rich())


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(data), indent=2) + "\n")


# ---------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.is_dir():
        params = read_params_dir(path, args.trace)
        requests = job_requests(params)
        result: dict[str, Any] = {
            "kind": "parameter files",
            "path": str(path),
            "applications": [
                {
                    "number": a.number,
                    "name": a.name,
                    "class": a.job_class,
                    "allowed": a.allowed.format(),
                    "template": a.template,
                }
                for a in params.applications
            ],
            "jobs": len(requests),
            "long": sum(r.job_class == "long" for r in requests),
            "short": sum(r.job_class == "short" for r in requests),
            "first_arrival": requests[0].submit_time if requests else None,
            "last_arrival": requests[-1].submit_time if requests else None,
        }
    else:
        log = read_swf(path)
        submits = [j.submit_time for j in log.jobs if j.submit_time != -1]
        result = {
            "kind": "swf",
            "path": str(path),
            "jobs": len(log.jobs),
            "comment_lines": sum(isinstance(e, Comment) for e in log.entries),
            "blank_lines": sum(isinstance(e, Blank) for e in log.entries),
            "header": log.header,
            "machine_size": machine_size(log),
            "first_submit": min(submits, default=None),
            "last_submit": max(submits, default=None),
        }
    if args.json:
        _print_json(result)
    else:
        print(f"{path}: OK, {result['kind']}, {result['jobs']} job(s)")
        for key, value in result.items():
            if key not in ("kind", "path", "jobs", "header", "applications"):
                print(f"  {key}: {value}")
        for app in result.get("applications", []):
            print(f"  application {app['number']} {app['name']} ({app['class']}, allowed {app['allowed']})")
    return 0


# ---------------------------------------------------------------- characterize


def cmd_characterize(args: argparse.Namespace) -> int:
    start = None
    if args.start:
        try:
            start = datetime.fromisoformat(args.start)
        except ValueError:
            raise UsageError(f"--start: not an ISO date and time: {args.start!r}") from None
    ch = characterize(read_swf(args.file), args.threshold, start)
    if args.json:
        _print_json(ch)
    else:
        _print_tables(characterization_tables(ch), args.markdown)
    return 0


# ---------------------------------------------------------------- generate


def _parse_t1(items: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not sep or not seconds > 0:
            raise UsageError(f"--t1 wants APP=SECONDS with SECONDS > 0, got {item!r}")
        catalog.app(key)
        out[key] = seconds
    return out


def _mix(text: str, util: float, short_util: float | None, t1: dict[str, float]):
    if text in mixes.APP_SETS:
        apps = mixes.app_set(text, t1)
        if short_util is not None:
            return mix_by_class(apps, util, short_util)
        return mix_from_weights([(a, 1.0) for a in apps])
    if short_util is not None:
        raise UsageError("--short-util goes with a named application set (" + ", ".join(mixes.APP_SETS) + ")")
    weights = []
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        try:
            weight = float(value) if sep else 1.0
        except ValueError:
            weight = float("nan")
        if not weight > 0:
            raise UsageError(f"--mix: weight of {key!r} must be a number > 0, got {value!r}")
        spec = catalog.app(key)
        weights.append((spec.with_t1(t1[key]) if key in t1 else spec, weight))
    return mix_from_weights(weights)


def _spec(args: argparse.Namespace) -> WorkloadSpec:
    t1 = _parse_t1(args.t1)
    if args.example:
        if args.mix or args.util is not None or args.short_util is not None:
            raise UsageError("--example fixes the mix and utilization; leave out --mix, --util and --short-util")
        ex = mixes.example(args.example)
        spec = ex.spec(t1, cpus=args.cpus or mixes.CPUS, duration=args.duration or mixes.DURATION)
        return replace(spec, seed=spec.seed if args.seed is None else args.seed)
    if not args.mix:
        raise UsageError("give --mix (an application set or APP=WEIGHT,...) or --example")
    util = 0.8 if args.util is None else args.util
    return WorkloadSpec(
        cpus=args.cpus or mixes.CPUS,
        utilization=util,
        mix=_mix(args.mix, util, args.short_util, t1),
        duration=args.duration or mixes.DURATION,
        seed=1 if args.seed is None else args.seed,
        name=args.mix,
    )


def _workload_summary(w: GeneratedWorkload, outputs: list[str]) -> dict[str, Any]:
    return {
        "name": w.spec.name,
        "cpus": w.spec.cpus,
        "target_utilization": w.spec.utilization,
        "offered_utilization": w.offered_utilization(),
        "duration": w.spec.duration,
        "seed": w.spec.seed,
        "jobs": len(w.arrivals),
        "jobs_per_class": w.counts(),
        "applications": [
            {
                "number": a.number,
                "name": e.app.key,
                "class": a.job_class,
                "t1": e.app.t1,
                "fraction": e.fraction,
            }
            for a, e in zip(w.applications, w.spec.mix, strict=True)
        ],
        "outputs": outputs,
    }


def cmd_generate(args: argparse.Namespace) -> int:
    if args.list:
        rows = [
            (a.key, a.job_class, f"{a.t1:g}", a.communication, "yes" if a.balanced else "no", a.command)
            for a in catalog.APPS.values()
        ]
        apps_table = TextTable(
            "applications",
            ("app", "class", "T1 (CPU-s)", "communication", "balanced", "template"),
            tuple(rows),
        )
        ex_rows = tuple(
            (e.name, e.app_set, f"{e.utilization:.0%}", f"{e.short_utilization:.0%}", e.description)
            for e in mixes.EXAMPLES.values()
        )
        ex_table = TextTable("examples", ("example", "apps", "utilization", "short", "description"), ex_rows)
        sets = TextTable(
            "application sets", ("set", "apps"), tuple((k, " ".join(v)) for k, v in mixes.APP_SETS.items())
        )
        if args.json:
            _print_json({"applications": catalog.APPS, "examples": mixes.EXAMPLES, "app_sets": mixes.APP_SETS})
        else:
            _print_tables([apps_table, sets, ex_table], False)
        return 0
    try:
        workload = generate(_spec(args))
    except WorkloadError as err:  # nothing is read from files here: every such error is in the arguments
        raise UsageError(str(err)) from None
    outputs: list[str] = []
    if args.params_dir:
        outputs.append(str(workload.write_params(args.params_dir, TRACE_FILE)))
    if args.output and args.output != "-":
        workload.write_swf(args.output)
        outputs.append(args.output)
    if args.json:
        _print_json(_workload_summary(workload, outputs))
    elif args.output == "-" or not outputs:
        sys.stdout.write(format_swf(workload.swf()))
    else:
        s = _workload_summary(workload, outputs)
        print(
            f"{s['jobs']} jobs ({s['jobs_per_class']['long']} long, {s['jobs_per_class']['short']} short) in "
            f"{s['duration']:g} s on {s['cpus']} CPUs: target utilization {s['target_utilization']:.0%}, "
            f"offered {s['offered_utilization']:.1%}; wrote {', '.join(outputs)}"
        )
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    written = mixes.write_examples(args.write)
    print(f"wrote {len(written)} example traces under {args.write}")
    return 0


# ---------------------------------------------------------------- metrics and compare


def _summary(path: str, cpus: int | None, taus: Sequence[float], step: int):
    log = read_swf(path)
    records = records_from_swf(log)
    return records, summarize(records, cpus or machine_size(log), taus, step)


def cmd_metrics(args: argparse.Namespace) -> int:
    taus = args.tau or list(DEFAULT_TAUS)
    records, summary = _summary(args.file, args.cpus, taus, args.step)
    if args.plots:
        from vmsched.workloads import plots

        out = Path(args.plots)
        plots.plot_response_by_class({Path(args.file).stem: summary}, out / "response_by_class.png")
        if summary.cpus:
            segments = segments_from_records(records)
            plots.plot_utilization(segments, summary.cpus, out / "utilization.png")
            plots.plot_partitions(segments, summary.cpus, out / "partitions.png")
    if args.json:
        _print_json(summary)
    else:
        _print_tables(summary_tables(summary, Path(args.file).name), args.markdown)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    a = records_from_swf(read_swf(args.a))
    b = records_from_swf(read_swf(args.b))
    label_a = args.label_a or Path(args.a).stem
    label_b = args.label_b or Path(args.b).stem
    rel = relative_performance(a, b, args.tolerance, label_a, label_b)
    if args.plot:
        from vmsched.workloads import plots

        plots.plot_relative_cdf(rel, args.plot)
    if args.json:
        _print_json(rel)
    else:
        _print_tables(relative_tables(rel), args.markdown)
    return 0


# ---------------------------------------------------------------- parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Workload files: check, characterize, generate, measure, compare."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", help="validate an SWF file or a directory of thesis parameter files")
    p.add_argument("file", help="SWF file, or directory with template.txt, allowed_procs.txt, job_types.txt, trace")
    p.add_argument("--trace", default=TRACE_FILE, help="trace file name inside a parameter directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("characterize", help="job classes LL/LH/HL/HH and hour groups per weekday")
    p.add_argument("file", help="SWF log")
    p.add_argument(
        "--threshold",
        type=_non_negative_float,
        default=DEFAULT_THRESHOLD,
        help="merge threshold in points (10)",
    )
    p.add_argument("--start", help="local date and time of submit time 0 (ISO), overriding the header")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="markdown tables instead of terminal tables")
    p.set_defaults(func=cmd_characterize)

    p = sub.add_parser("generate", help="Poisson arrivals for a target utilization (thesis eq. 3.2)")
    p.add_argument("--example", help="a predefined workload (see --list)")
    p.add_argument("--mix", help="application set (hc, lc, imbalanced) or APP[=WEIGHT],... e.g. cg.A=3,sweep.W=1")
    p.add_argument("--util", type=_positive_float, help="target machine utilization, 1.0 = 100%% (0.8)")
    p.add_argument("--short-util", type=float, help="utilization generated by short jobs (named sets only)")
    p.add_argument("--cpus", type=_positive_int, help="processors P (2)")
    p.add_argument("--duration", type=_positive_float, help="time of the last possible arrival, seconds (600)")
    p.add_argument("--seed", type=int, help="random seed (1, or the example's)")
    p.add_argument("--t1", action="append", default=[], metavar="APP=SECONDS", help="override an app's T1")
    p.add_argument("-o", "--output", help="write the SWF trace here ('-' for stdout)")
    p.add_argument("--params-dir", help="write the thesis parameter files and trace.swf here")
    p.add_argument("--list", action="store_true", help="list applications, sets and examples")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("examples", help="regenerate the example workload files")
    p.add_argument("--write", required=True, metavar="DIR", help="root directory (vmsched/workloads/examples)")
    p.set_defaults(func=cmd_examples)

    p = sub.add_parser("metrics", help="metrics of a result SWF (submit, wait and run times known)")
    p.add_argument("file", help="result SWF")
    p.add_argument("--cpus", type=_positive_int, help="machine size (default: header MaxProcs / MaxNodes)")
    p.add_argument("--tau", type=_positive_float, action="append", help="bounded-slowdown threshold (10 and 100)")
    p.add_argument("--step", type=_positive_int, default=10, help="jobs per turnaround step (10)")
    p.add_argument("--plots", metavar="DIR", help="write response/utilization/partition PNGs here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("compare", help="relative performance of run B against run A of the same workload")
    p.add_argument("a", help="result SWF of the reference run")
    p.add_argument("b", help="result SWF of the other run")
    p.add_argument("--tolerance", type=_fraction, default=DEFAULT_TOLERANCE, help="equal within this fraction (0.05)")
    p.add_argument("--label-a")
    p.add_argument("--label-b")
    p.add_argument("--plot", metavar="PNG", help="write the CDF of the per-job ratios here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true")
    p.set_defaults(func=cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.func(args)
    except UsageError as err:
        parser.print_usage(sys.stderr)
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 2
    except WorkloadError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{PROG} {args.command}: error: {err.filename or ''}: {err.strerror}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
