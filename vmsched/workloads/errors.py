"""The one exception the workloads package raises for bad input."""

from __future__ import annotations

from os import PathLike


class WorkloadError(ValueError):
    """Bad workload input. ``str(err)`` names the file and line when they are known: ``file:line: msg``."""

    def __init__(self, message: str, path: str | PathLike[str] | None = None, line: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(where + message)
