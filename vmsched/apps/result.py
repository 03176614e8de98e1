"""The one machine-readable result line every app prints on rank 0, and its parser.

Format: a single line ``VMAPP {json}`` where the JSON object has at least the keys in REQUIRED_KEYS:

- ``app`` (str), ``class`` (str), ``ranks`` (int)
- ``time``: seconds of the timed section, the maximum over ranks
- ``mpi_time``: seconds spent inside MPI calls during the timed section, mean over ranks
- ``mpi_pct``: 100 * mean over ranks of (rank's MPI time / rank's timed section)
- ``verified`` (bool), ``checksum`` (str, independent of the number of ranks)
- ``info`` (object): app-specific figures (iterations, residuals, variant, ...)
"""

from __future__ import annotations

import json
import sys
from typing import Any

PREFIX = "VMAPP "
REQUIRED_KEYS = ("app", "class", "ranks", "time", "mpi_time", "mpi_pct", "verified", "checksum", "info")


def format_result(result: dict[str, Any]) -> str:
    """Render a result dict as the result line (no trailing newline)."""
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise ValueError(f"result lacks keys {missing}")
    ordered = {k: result[k] for k in REQUIRED_KEYS}
    ordered.update({k: v for k, v in result.items() if k not in ordered})
    return PREFIX + json.dumps(ordered, separators=(", ", ": "))


def emit_result(result: dict[str, Any]) -> None:
    """Print the result line on stdout and flush (stdout may be a pipe read by the launcher)."""
    print(format_result(result), file=sys.stdout, flush=True)


def parse_result(stdout: str) -> dict[str, Any]:
    """Return the result dict from an app's stdout; ValueError unless there is exactly one valid line."""
    lines = [line for line in stdout.splitlines() if line.startswith(PREFIX)]
    if len(lines) != 1:
        raise ValueError(f"expected exactly one {PREFIX.strip()} line, found {len(lines)}")
    try:
        result = json.loads(lines[0][len(PREFIX) :])
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed result line: {exc}") from exc
    if not isinstance(result, dict):
        raise ValueError("result line does not hold a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise ValueError(f"result line lacks keys {missing}")
    return result
