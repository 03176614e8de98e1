"""The thesis's launcher parameter files (thesis §3.2.1, figs 3.2-3.5) and the job requests they describe.

A parameter set is four files, one application per line in the first three, in the same order:

``template.txt``
    one command line per application with the letter ``N`` where the number of processes goes
    (``mpiexec -n N python -m vmsched.apps.cg --class A``; NAS-style binaries ``cg.B.N`` work too).
``allowed_procs.txt``
    the process counts each application accepts (``4 2 1 1 1 1 1``); ``-1`` in every column after the
    first means "any count from 1 up to the first number" (``60 -1 -1 -1 -1 -1 -1``).
``job_types.txt``
    ``1`` for a long job, ``2`` for a short job.
``trace.swf``
    the arrival trace in SWF: field 2 is the arrival time in seconds, field 14 (executable number) the
    application number, counted from 0 in template order. Field 8 (requested processors) and field 9
    (requested time) are used when they are not ``-1``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Literal

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.swf import UNKNOWN, SwfJob, SwfLog, make_log, parse_swf, write_swf

JobClass = Literal["long", "short"]

TEMPLATE_FILE = "template.txt"
ALLOWED_FILE = "allowed_procs.txt"
TYPES_FILE = "job_types.txt"
TRACE_FILE = "trace.swf"

#: job type numbers of the thesis's job-type file
JOB_TYPE_NUMBERS: dict[int, JobClass] = {1: "long", 2: "short"}
JOB_TYPE_OF_CLASS: dict[JobClass, int] = {"long": 1, "short": 2}
#: columns the thesis's launcher reads from an allowed-counts line; the writer pads to this width
ALLOWED_COLUMNS = 7

_N_RE = re.compile(r"(?<![A-Za-z0-9_])N(?![A-Za-z0-9_])")
_LAUNCHERS = {"mpiexec", "mpirun", "mpiexec.hydra", "srun"}


@dataclass(frozen=True)
class AllowedCounts:
    """Process counts an application accepts: the explicit ``counts`` (descending), or, when
    ``any_up_to_max``, every count from 1 to ``maximum``."""

    maximum: int
    counts: tuple[int, ...] = ()
    any_up_to_max: bool = False

    def allows(self, n: int) -> bool:
        return 1 <= n <= self.maximum if self.any_up_to_max else n in self.counts

    def choices(self) -> tuple[int, ...]:
        """Every allowed count, largest first."""
        return tuple(range(self.maximum, 0, -1)) if self.any_up_to_max else self.counts

    def format(self) -> str:
        """The thesis's one-line form, padded to seven columns."""
        if self.any_up_to_max:
            cols = [self.maximum] + [UNKNOWN] * (ALLOWED_COLUMNS - 1)
        else:
            cols = list(self.counts) + [self.counts[-1]] * max(0, ALLOWED_COLUMNS - len(self.counts))
        return " ".join(str(c) for c in cols)

    @classmethod
    def any_up_to(cls, maximum: int) -> AllowedCounts:
        return cls(maximum, (), True)

    @classmethod
    def of(cls, counts: Sequence[int]) -> AllowedCounts:
        unique = tuple(sorted(set(counts), reverse=True))
        if not unique or unique[-1] < 1:
            raise ValueError(f"process counts must be >= 1, got {list(counts)}")
        return cls(unique[0], unique, False)


@dataclass(frozen=True)
class Application:
    """One line of the template with its allowed counts and job class; ``number`` counts from 0."""

    number: int
    template: str
    allowed: AllowedCounts
    job_class: JobClass

    @property
    def name(self) -> str:
        return application_name(self.template)


@dataclass(frozen=True)
class Arrival:
    """One line of the arrival trace."""

    job_number: int
    submit_time: float
    app_number: int
    requested_processors: int | None = None
    requested_time: float | None = None
    line: int = 0


@dataclass(frozen=True)
class ParameterSet:
    applications: tuple[Application, ...]
    arrivals: tuple[Arrival, ...]


@dataclass(frozen=True)
class JobRequest:
    """What a replay submits for one arrival."""

    job_number: int
    submit_time: float
    name: str
    command_template: str
    allowed_counts: AllowedCounts
    requested_procs: int
    job_class: JobClass
    estimate: float | None = None
    app_number: int = 0

    def command(self, n: int | None = None) -> str:
        """The command line with ``N`` replaced by ``n`` (default: the requested count)."""
        return substitute_procs(self.command_template, self.requested_procs if n is None else n)

    def program_argv(self, n: int | None = None) -> list[str]:
        """The program's argv without a leading ``mpiexec -n N`` (for a launcher that adds its own)."""
        return strip_launcher(shlex.split(self.command(n)))


def substitute_procs(template: str, n: int) -> str:
    """Replace every standalone ``N`` (a word, or a dotted part like ``cg.B.N``) by ``n``."""
    return _N_RE.sub(str(n), template)


def has_procs_placeholder(template: str) -> bool:
    return _N_RE.search(template) is not None


def strip_launcher(argv: list[str]) -> list[str]:
    """Drop a leading ``mpiexec|mpirun -n|-np K`` from an argv."""
    if argv and Path(argv[0]).name in _LAUNCHERS:
        rest = argv[1:]
        if len(rest) >= 2 and rest[0] in ("-n", "-np", "--np", "-c"):
            return rest[2:]
        if rest and re.fullmatch(r"(-n|-np|--np)=\S+", rest[0]):
            return rest[1:]
        return rest
    return argv


def application_name(template: str) -> str:
    """A short name for a template: ``cg.A`` for ``... python -m vmsched.apps.cg --class A``, ``send.W.50x6`` for
    ``... vmsched.apps.send --class W --variant 50x6``, else the program's file name (``cg.B.N``)."""
    try:
        argv = strip_launcher(shlex.split(template))
    except ValueError:
        argv = template.split()
    if not argv:
        return "app"
    name = Path(argv[0]).name
    if "-m" in argv[:-1]:
        name = argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
    for option in ("--class", "--variant"):
        if option in argv[:-1]:
            name += "." + argv[argv.index(option) + 1]
    return name


def _lines(path: Path, what: str) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(f"{what} file is missing", path) from None
    except IsADirectoryError:
        raise WorkloadError(f"{what} file is a directory", path) from None
    except (OSError, UnicodeDecodeError) as err:
        raise WorkloadError(f"cannot read {what} file: {err}", path) from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def read_template(path: str | PathLike[str]) -> tuple[str, ...]:
    """Read a template file: one command line per application, each with an ``N`` placeholder."""
    path = Path(path)
    lines = _lines(path, "template")
    if not lines:
        raise WorkloadError("template file lists no application", path)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise WorkloadError("blank line: each line of a template is one application", path, number)
        if not has_procs_placeholder(line):
            raise WorkloadError(f"no N placeholder for the number of processes in {line.strip()!r}", path, number)
        try:
            shlex.split(line)
        except ValueError as err:
            raise WorkloadError(f"cannot split the command line: {err}", path, number) from None
    return tuple(line.strip() for line in lines)


def parse_allowed_line(text: str, source: str | Path = "<allowed>", line: int = 0) -> AllowedCounts:
    """One line of an allowed-counts file (fig. 3.3)."""
    tokens = text.split()
    if not tokens:
        raise WorkloadError("blank line: each line lists the process counts of one application", source, line)
    try:
        values = [int(t) for t in tokens]
    except ValueError:
        raise WorkloadError(f"process counts must be integers: {text.strip()!r}", source, line) from None
    first, rest = values[0], values[1:]
    if first < 1:
        raise WorkloadError(f"the first count must be >= 1, got {first}", source, line)
    if rest and all(v == UNKNOWN for v in rest):
        return AllowedCounts.any_up_to(first)
    if UNKNOWN in rest:
        raise WorkloadError(
            "-1 means 'any count up to the first' and must fill every column after the first", source, line
        )
    bad = [v for v in rest if v < 1 or v > first]
    if bad:
        raise WorkloadError(f"counts must be between 1 and the first count {first}: {bad}", source, line)
    return AllowedCounts.of(values)


def read_allowed(path: str | PathLike[str]) -> tuple[AllowedCounts, ...]:
    path = Path(path)
    return tuple(parse_allowed_line(t, path, n) for n, t in enumerate(_lines(path, "allowed counts"), start=1))


def read_job_types(path: str | PathLike[str]) -> tuple[JobClass, ...]:
    """Read a job-type file: ``1`` (long) or ``2`` (short) per line."""
    path = Path(path)
    classes: list[JobClass] = []
    for number, text in enumerate(_lines(path, "job types"), start=1):
        token = text.strip()
        if not token.lstrip("+-").isdigit() or int(token) not in JOB_TYPE_NUMBERS:
            raise WorkloadError(f"job type must be 1 (long) or 2 (short), got {token!r}", path, number)
        classes.append(JOB_TYPE_NUMBERS[int(token)])
    return tuple(classes)


def _int_or_none(value: float) -> int | None:
    return None if value == UNKNOWN else int(value)


def arrivals_from_log(log: SwfLog, applications: int) -> tuple[Arrival, ...]:
    """Arrivals of an SWF trace whose field 14 numbers one of ``applications`` applications."""
    arrivals: list[Arrival] = []
    for entry in log.job_lines:
        job = entry.job
        app = job.executable_number
        if app == UNKNOWN:
            raise WorkloadError("no application number (field 14 is -1)", log.source, entry.line)
        if app != int(app) or not 0 <= app < applications:
            raise WorkloadError(
                f"unknown application number {app}: the template has {applications} application(s), "
                f"numbered 0 to {applications - 1}",
                log.source,
                entry.line,
            )
        if job.submit_time == UNKNOWN:
            raise WorkloadError("no arrival time (field 2 is -1)", log.source, entry.line)
        arrivals.append(
            Arrival(
                job_number=int(job.job_number),
                submit_time=float(job.submit_time),
                app_number=int(app),
                requested_processors=_int_or_none(job.requested_processors),
                requested_time=None if job.requested_time == UNKNOWN else float(job.requested_time),
                line=entry.line,
            )
        )
    return tuple(arrivals)


def read_arrivals(path: str | PathLike[str], applications: int) -> tuple[Arrival, ...]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise WorkloadError("arrival trace file is missing", path) from None
    except OSError as err:
        raise WorkloadError(f"cannot read arrival trace: {err.strerror}", path) from None
    return arrivals_from_log(parse_swf(text, str(path)), applications)


def read_params(
    template: str | PathLike[str],
    allowed: str | PathLike[str],
    job_types: str | PathLike[str],
    trace: str | PathLike[str],
) -> ParameterSet:
    """Read the four parameter files and check that they agree with each other."""
    commands = read_template(template)
    counts = read_allowed(allowed)
    classes = read_job_types(job_types)
    for what, path, items in (("allowed counts", allowed, counts), ("job types", job_types, classes)):
        if len(items) != len(commands):
            raise WorkloadError(
                f"{what} file has {len(items)} line(s) but the template {Path(template)} has "
                f"{len(commands)} application(s); they must match line by line",
                path,
            )
    apps = tuple(Application(i, c, a, k) for i, (c, a, k) in enumerate(zip(commands, counts, classes, strict=True)))
    arrivals = read_arrivals(trace, len(apps))
    for arrival in arrivals:
        app = apps[arrival.app_number]
        n = arrival.requested_processors
        if n is not None and not app.allowed.allows(n):
            raise WorkloadError(
                f"requested processors {n} (field 8) not allowed for application {app.number} "
                f"({app.name}): allowed {app.allowed.format()}",
                Path(trace),
                arrival.line,
            )
    return ParameterSet(apps, arrivals)


def read_params_dir(directory: str | PathLike[str], trace: str = TRACE_FILE) -> ParameterSet:
    """Read ``template.txt``, ``allowed_procs.txt``, ``job_types.txt`` and the trace from a directory."""
    d = Path(directory)
    if not d.is_dir():
        raise WorkloadError("not a directory of parameter files", d)
    return read_params(d / TEMPLATE_FILE, d / ALLOWED_FILE, d / TYPES_FILE, d / trace)


def job_requests(params: ParameterSet, default_estimates: dict[JobClass, float] | None = None) -> list[JobRequest]:
    """One request per arrival, in arrival order (ties keep trace order).

    The requested count is the trace's field 8 when given, else the largest allowed count; the estimate
    is the trace's field 9 when given, else ``default_estimates[class]`` (``None`` when absent)."""
    defaults = default_estimates or {}
    requests: list[JobRequest] = []
    for arrival in sorted(params.arrivals, key=lambda a: a.submit_time):
        app = params.applications[arrival.app_number]
        procs = arrival.requested_processors or app.allowed.maximum
        estimate = arrival.requested_time if arrival.requested_time is not None else defaults.get(app.job_class)
        requests.append(
            JobRequest(
                job_number=arrival.job_number,
                submit_time=arrival.submit_time,
                name=f"{app.name}-{arrival.job_number}",
                command_template=app.template,
                allowed_counts=app.allowed,
                requested_procs=procs,
                job_class=app.job_class,
                estimate=estimate,
                app_number=app.number,
            )
        )
    return requests


def arrival_log(arrivals: Sequence[Arrival], header: dict[str, object] | None = None) -> SwfLog:
    """The SWF trace of a list of arrivals (queue number = job type is left to the caller's header)."""
    jobs = [
        SwfJob(
            job_number=a.job_number,
            submit_time=_compact(a.submit_time),
            requested_processors=UNKNOWN if a.requested_processors is None else a.requested_processors,
            requested_time=UNKNOWN if a.requested_time is None else _compact(a.requested_time),
            executable_number=a.app_number,
        )
        for a in arrivals
    ]
    return make_log(jobs, header)


def _compact(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def write_params(
    directory: str | PathLike[str],
    applications: Sequence[Application],
    trace: SwfLog,
    trace_name: str = TRACE_FILE,
    write_applications: bool = True,
) -> Path:
    """Write the parameter files (and the trace, named ``trace_name``) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if write_applications:
        (d / TEMPLATE_FILE).write_text("".join(a.template + "\n" for a in applications))
        (d / ALLOWED_FILE).write_text("".join(a.allowed.format() + "\n" for a in applications))
        (d / TYPES_FILE).write_text("".join(f"{JOB_TYPE_OF_CLASS[a.job_class]}\n" for a in applications))
    write_swf(trace, d / trace_name)
    return d
