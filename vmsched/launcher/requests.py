"""Parsing and validating job submissions: pure functions shared by `vmsubmit` (early, friendly errors)
and the launcher daemon (the authority: it never trusts the client)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from math import ceil
from typing import Any

from vmsched.config import LauncherConfig


class RequestError(ValueError):
    """A submission that cannot be accepted; the message says why."""


_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """'90' / '90s' / '10m' / '1h30m' / 'HH:MM:SS' / 'MM:SS' -> seconds."""
    t = text.strip().lower()
    if ":" in t:
        parts = t.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise RequestError(f"bad duration {text!r}: use e.g. 90s, 10m, 1h30m or HH:MM:SS")
        secs = 0.0
        for p in parts:
            secs = secs * 60 + int(p)
        return secs
    m = _DURATION.match(t)
    if not t or not m or not any(m.groupdict().values()):
        raise RequestError(f"bad duration {text!r}: use e.g. 90s, 10m, 1h30m or HH:MM:SS")
    return int(m["h"] or 0) * 3600 + int(m["m"] or 0) * 60 + float(m["s"] or 0)


def parse_procs(text: str) -> tuple[int, ...]:
    """'8' -> (8,); '32,16,8' -> (32, 16, 8); '4-8' -> (8, 7, 6, 5, 4). Always distinct, descending."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise RequestError(f"bad process counts {text!r}: use e.g. 8, 32,16,8 or 4-16") from None
    if not out or min(out) < 1:
        raise RequestError(f"bad process counts {text!r}: counts must be >= 1")
    return tuple(sorted(out, reverse=True))


def parse_time(text: str, now: float | None = None, what: str = "time") -> float:
    """'+30m' / '-2h' (relative to now), 'now', an ISO date-time (local time), or epoch seconds -> epoch seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    if t.lower() == "now":
        return now
    if t[:1] in ("+", "-"):
        try:
            return now + (1 if t[0] == "+" else -1) * parse_duration(t[1:])
        except RequestError:
            raise RequestError(f"bad {what} {text!r}: a relative time is +DURATION or -DURATION, e.g. +30m") from None
    if _is_number(t):
        return float(t)
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise RequestError(f"bad {what} {text!r}: use +30m, now, 2026-11-21T18:00 or epoch seconds") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_deadline(text: str, now: float | None = None) -> float:
    """'+30m' (relative), an ISO date-time (local time), or epoch seconds -> epoch seconds."""
    return parse_time(text, now, "deadline")


# What `--export NONE` keeps: enough for a program to be found and to know whose it is.
MINIMAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "SHELL")


def export_env(spec: str, environ: dict[str, str]) -> dict[str, str]:
    """The job's environment for `--export` (as in Slurm): ALL (the default) or NONE, and/or a
    comma-separated list of NAME (taken from `environ`) and NAME=value; a list without ALL starts from
    the minimal environment."""
    items = [i.strip() for i in spec.split(",") if i.strip()]
    if not items:
        raise RequestError("--export needs ALL, NONE or a list of NAME and NAME=value")
    base = environ if "ALL" in items else {k: environ[k] for k in MINIMAL_ENV if k in environ}
    env = dict(base)
    for item in items:
        if item in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise RequestError(f"--export: {name!r} is not a variable name")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
        else:
            raise RequestError(f"--export: {name} is not set in this environment")
    return env


@dataclass(frozen=True)
class Submission:
    """A validated job request."""

    name: str
    command: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str
    stderr: str
    procs: tuple[int, ...]
    max_mpl: int | None
    job_class: str
    estimate: float
    time_limit: float | None
    deadline: float | None
    begin_time: float | None = None


def _int(msg: dict[str, Any], key: str) -> int | None:
    v = msg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{key} must be an integer, got {v!r}")
    return v


def _num(msg: dict[str, Any], key: str) -> float | None:
    v = msg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise RequestError(f"{key} must be a number, got {v!r}")
    return float(v)


def validate_submission(msg: dict[str, Any], cfg: LauncherConfig, ncpus: int, max_mpl_limit: int,
                        now: float) -> Submission:  # fmt: skip
    """Check every field of a submit request; raise RequestError with a message for the user."""
    command = msg.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise RequestError("command must be a non-empty list of strings (vmsubmit ... -- program args)")
    raw = msg.get("procs")
    if not isinstance(raw, list) or not raw or not all(isinstance(p, int) and not isinstance(p, bool) for p in raw):
        raise RequestError("procs must be a non-empty list of rank counts")
    procs = tuple(sorted(set(raw), reverse=True))
    if procs[-1] < 1:
        raise RequestError(f"rank counts must be >= 1, got {procs[-1]}")
    if procs[0] > cfg.max_ranks:
        raise RequestError(f"{procs[0]} ranks is more than the {cfg.max_ranks} a job may have")
    max_mpl = _int(msg, "max_mpl")
    if max_mpl is not None and max_mpl < 1:
        raise RequestError(f"max MPL must be >= 1, got {max_mpl}")
    fold = max_mpl_limit if max_mpl is None else min(max_mpl, max_mpl_limit)  # no policy folds further
    if ceil(procs[-1] / fold) > ncpus:
        raise RequestError(
            f"{procs[-1]} ranks at max MPL {fold} need {ceil(procs[-1] / fold)} CPUs; this node has {ncpus} "
            f"(no allowed folding fits: at most max MPL {fold}, "
            + ("your --max-mpl)" if max_mpl is not None and max_mpl <= max_mpl_limit else "the policy's limit)")
        )
    time_limit = _num(msg, "time_limit")
    if time_limit is not None and time_limit <= 0:
        raise RequestError(f"time limit must be > 0 seconds, got {time_limit}")
    job_class = msg.get("job_class")
    if job_class not in (None, "long", "short"):
        raise RequestError(f"class must be long or short, got {job_class!r}")
    if time_limit is not None:
        estimate = time_limit
        job_class = job_class or ("long" if time_limit > cfg.long_threshold_s else "short")
    else:
        job_class = job_class or "long"
        estimate = cfg.long_estimate_s if job_class == "long" else cfg.short_estimate_s
    deadline = _num(msg, "deadline")
    if deadline is not None and deadline <= now:
        raise RequestError("the deadline is in the past")
    begin_time = _num(msg, "begin_time")
    if begin_time is not None and begin_time < now - 1.0:  # a second of slack for the trip here
        raise RequestError("the begin time is in the past")
    name = msg.get("name") or command[0].rsplit("/", 1)[-1]
    if not isinstance(name, str) or len(name) > 200:
        raise RequestError("name must be a string of at most 200 characters")
    cwd = msg.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise RequestError("cwd must be an absolute path")
    env = msg.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise RequestError("env must map strings to strings")
    out = msg.get("stdout") or ""
    err = msg.get("stderr") or ""
    if not isinstance(out, str) or not isinstance(err, str):
        raise RequestError("stdout/stderr must be paths")
    return Submission(name, list(command), cwd, dict(env), out, err, procs, max_mpl, job_class, estimate,
                      time_limit, deadline, begin_time)  # fmt: skip
