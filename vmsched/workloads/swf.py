"""Standard Workload Format (SWF) reader and writer.

An SWF file (Feitelson's Parallel Workloads Archive) has one job per line, 18 whitespace-separated
numeric fields, ``-1`` meaning "unknown"; lines starting with ``;`` are comments, and the comments at the
top of the file form the header (``; MaxProcs: 256``).

:func:`parse_swf` keeps every line - comments, blank lines and the exact text of each job line - so that
:func:`format_swf` reproduces an unchanged log byte for byte; jobs that were replaced or built from
scratch are written in a canonical single-space layout. Anything malformed raises
:class:`~vmsched.workloads.errors.WorkloadError` naming the file and line; nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from vmsched.workloads.errors import WorkloadError

Number = int | float

#: The 18 SWF fields in file order, named as in the SWF definition.
FIELD_NAMES: tuple[str, ...] = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time_used",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable_number",
    "queue_number",
    "partition_number",
    "preceding_job_number",
    "think_time_from_preceding_job",
)

UNKNOWN = -1

_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_HEADER_RE = re.compile(r";\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s?(.*?)\s*$")


@dataclass(frozen=True)
class SwfJob:
    """One SWF job record: the 18 fields in file order; ``-1`` means unknown. Times are seconds."""

    job_number: Number
    submit_time: Number
    wait_time: Number = UNKNOWN
    run_time: Number = UNKNOWN
    allocated_processors: Number = UNKNOWN
    average_cpu_time_used: Number = UNKNOWN
    used_memory: Number = UNKNOWN
    requested_processors: Number = UNKNOWN
    requested_time: Number = UNKNOWN
    requested_memory: Number = UNKNOWN
    status: Number = UNKNOWN
    user_id: Number = UNKNOWN
    group_id: Number = UNKNOWN
    executable_number: Number = UNKNOWN
    queue_number: Number = UNKNOWN
    partition_number: Number = UNKNOWN
    preceding_job_number: Number = UNKNOWN
    think_time_from_preceding_job: Number = UNKNOWN

    def fields(self) -> tuple[Number, ...]:
        """The 18 values in file order."""
        return dataclasses.astuple(self)

    def format(self) -> str:
        """The canonical text of this job: 18 fields separated by single spaces."""
        return " ".join(format_number(v) for v in self.fields())


@dataclass(frozen=True)
class Comment:
    """A ``;`` comment line, kept verbatim (without the line end)."""

    text: str
    line: int = 0


@dataclass(frozen=True)
class Blank:
    """An empty or whitespace-only line, kept verbatim."""

    text: str = ""
    line: int = 0


@dataclass(frozen=True)
class JobLine:
    """A job line: the parsed job, the original text (``None`` for jobs not read from a file), line number."""

    job: SwfJob
    text: str | None = None
    line: int = 0


Entry = Comment | Blank | JobLine


@dataclass(frozen=True)
class SwfLog:
    """A whole SWF file: its lines in order. ``source`` names the file in error messages."""

    entries: tuple[Entry, ...]
    source: str = "<swf>"
    trailing_newline: bool = True
    _jobs: tuple[SwfJob, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_jobs", tuple(e.job for e in self.entries if isinstance(e, JobLine)))

    @property
    def jobs(self) -> tuple[SwfJob, ...]:
        return self._jobs

    @property
    def job_lines(self) -> tuple[JobLine, ...]:
        return tuple(e for e in self.entries if isinstance(e, JobLine))

    @property
    def comments(self) -> tuple[str, ...]:
        return tuple(e.text for e in self.entries if isinstance(e, Comment))

    @property
    def header(self) -> dict[str, str]:
        """``; Key: value`` fields of the comment block before the first job (repeated keys joined by
        newlines, e.g. several ``Note`` lines)."""
        fields: dict[str, str] = {}
        for entry in self.entries:
            if isinstance(entry, JobLine):
                break
            if isinstance(entry, Comment):
                m = _HEADER_RE.match(entry.text.strip())
                if m:
                    key, value = m.group(1), m.group(2)
                    fields[key] = f"{fields[key]}\n{value}" if key in fields else value
        return fields

    def with_jobs(self, jobs: Iterable[SwfJob]) -> SwfLog:
        """The same header comments with a new list of jobs (written in canonical layout)."""
        head: list[Entry] = []
        for entry in self.entries:
            if isinstance(entry, JobLine):
                break
            head.append(entry)
        return SwfLog(tuple(head) + tuple(JobLine(j) for j in jobs), self.source)


def header_number(log: SwfLog, key: str) -> float | None:
    """A numeric header field (``MaxProcs``, ``UnixStartTime``...) or ``None`` when absent.

    Raises :class:`WorkloadError` when the field is present but not a number."""
    value = log.header.get(key)
    if value is None:
        return None
    try:
        number = float(value.split()[0]) if value.split() else float("nan")
    except ValueError:
        number = float("nan")
    if not math.isfinite(number):
        raise WorkloadError(f"header field {key} is not a number: {value!r}", log.source)
    return number


def machine_size(log: SwfLog) -> int | None:
    """Number of processors of the logged machine: header ``MaxProcs``, else ``MaxNodes``."""
    for key in ("MaxProcs", "MaxNodes"):
        value = header_number(log, key)
        if value is not None and value > 0:
            return int(value)
    return None


def make_log(jobs: Iterable[SwfJob], header: Mapping[str, object] | None = None, source: str = "<swf>") -> SwfLog:
    """A new log: ``; Key: value`` header lines (in the order given) followed by the jobs."""
    entries: list[Entry] = []
    for key, value in (header or {}).items():
        for part in str(value).split("\n"):
            entries.append(Comment(f"; {key}: {part}"))
    entries.extend(JobLine(j) for j in jobs)
    return SwfLog(tuple(entries), source)


def format_number(value: Number) -> str:
    """Integers as integers, floats in their shortest exact form (``12.5``, ``1e-05``)."""
    if isinstance(value, bool):
        raise TypeError("SWF fields are numbers, not booleans")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError(f"SWF fields must be finite numbers, got {value!r}")
    return repr(float(value))


def _parse_number(token: str) -> Number | None:
    if _INT_RE.fullmatch(token):
        return int(token)
    if _FLOAT_RE.fullmatch(token):
        return float(token)
    return None


def parse_job_line(text: str, source: str = "<swf>", line: int = 0) -> SwfJob:
    """Parse one job line; raise :class:`WorkloadError` naming ``source:line`` when it is malformed."""
    tokens = text.split()
    if len(tokens) != len(FIELD_NAMES):
        raise WorkloadError(f"expected {len(FIELD_NAMES)} fields, found {len(tokens)}", source, line)
    values: list[Number] = []
    for index, (name, token) in enumerate(zip(FIELD_NAMES, tokens, strict=True), start=1):
        value = _parse_number(token)
        if value is None:
            raise WorkloadError(f"field {index} ({name}) is not a number: {token!r}", source, line)
        if value < 0 and value != UNKNOWN:
            raise WorkloadError(
                f"field {index} ({name}) is negative ({token}); only -1 (unknown) is allowed", source, line
            )
        values.append(value)
    return SwfJob(*values)


def parse_swf(text: str, source: str = "<swf>") -> SwfLog:
    """Parse the text of an SWF file. Every line is kept; malformed job lines raise WorkloadError."""
    lines = text.split("\n")
    trailing_newline = bool(lines) and lines[-1] == ""
    if trailing_newline:
        lines.pop()
    entries: list[Entry] = []
    for number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.strip()
        if not stripped:
            entries.append(Blank(line, number))
        elif stripped.startswith(";"):
            entries.append(Comment(line, number))
        else:
            entries.append(JobLine(parse_job_line(line, source, number), line, number))
    return SwfLog(tuple(entries), source, trailing_newline or not lines)


def read_swf(path: str | PathLike[str]) -> SwfLog:
    """Read an SWF file. Raises WorkloadError (with the file name) when it is missing or malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise WorkloadError("no such file", path) from None
    except IsADirectoryError:
        raise WorkloadError("is a directory, expected an SWF file", path) from None
    except OSError as err:
        raise WorkloadError(f"cannot read: {err.strerror}", path) from None
    return parse_swf(text, str(path))


def _job_text(entry: JobLine, source: str) -> str:
    if entry.text is not None:
        try:
            if parse_job_line(entry.text, source, entry.line) == entry.job:
                return entry.text
        except WorkloadError:
            pass
    return entry.job.format()


def format_swf(log: SwfLog) -> str:
    """The text of a log; unchanged lines read from a file come back exactly as they were."""
    out: list[str] = []
    for entry in log.entries:
        if isinstance(entry, JobLine):
            out.append(_job_text(entry, log.source))
        else:
            out.append(entry.text)
    text = "\n".join(out)
    return text + "\n" if out and log.trailing_newline else text


def write_swf(log: SwfLog, path: str | PathLike[str]) -> None:
    """Write a log to ``path``."""
    Path(path).write_text(format_swf(log), encoding="utf-8", errors="surrogateescape")
