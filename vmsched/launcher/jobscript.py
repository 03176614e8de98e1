"""Job scripts for `vmsubmit SCRIPT [args]`: `#VMSCHED` directive lines and the command that runs it.

As with `#SBATCH`: directives are the comment lines starting with `#VMSCHED` at the top of the script,
before its first command (later ones are ignored, like any comment); each holds `vmsubmit` options
exactly as on the command line, which wins over them. The script is read by `vmsubmit`, that is by the
submitting user; each rank runs it (`mpiexec -n N SCRIPT args`) through the interpreter of its `#!`
line (default /bin/sh), so a script ends with e.g. `exec python -m vmsched.apps.cg --class S`.
"""

from __future__ import annotations

import os
import shlex

from vmsched.launcher.requests import RequestError

PREFIX = "#VMSCHED"
DEFAULT_SHELL = ("/bin/sh",)


def read_script(path: str) -> str:
    """The script's text, read with the caller's own permissions; RequestError says what is wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise RequestError(f"job script {path} does not exist") from None
    except IsADirectoryError:
        raise RequestError(f"job script {path} is a directory") from None
    except PermissionError:
        raise RequestError(f"job script {path} is not readable by you (permission denied)") from None
    except OSError as e:
        raise RequestError(f"cannot read job script {path}: {e.strerror}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RequestError(f"job script {path} is not a text file") from None


def directives(text: str) -> list[tuple[int, list[str]]]:
    """(line number, option words) of each directive, in order; RequestError for a malformed one."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if number == 1 and line.startswith("#!"):
            continue
        if line.startswith(PREFIX):
            rest = line[len(PREFIX) :]
            if rest and not rest[0].isspace():
                raise RequestError(f"line {number}: malformed directive {line!r} (write {PREFIX} OPTIONS)")
            try:
                words = shlex.split(rest, comments=True)
            except ValueError as e:
                raise RequestError(f"line {number}: malformed directive {line!r}: {e}") from None
            if not words:
                raise RequestError(f"line {number}: empty directive {line!r}")
            out.append((number, words))
        elif line and not line.startswith("#"):
            break  # the first command ends the directives
    return out


def script_command(path: str, text: str, args: list[str]) -> list[str]:
    """The command each rank runs: the script's interpreter (its #! line), the script, its arguments."""
    first = text.split("\n", 1)[0]
    interpreter = shlex.split(first[2:]) if first.startswith("#!") else []
    return [*(interpreter or DEFAULT_SHELL), os.path.abspath(path), *args]
