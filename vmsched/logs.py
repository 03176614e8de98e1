"""The daemons' logs: one line per event, as key=value fields (logfmt), e.g.

    level=info daemon=vm-launcher action=start job=12 user=alice ranks=8 max_mpl=4 backfilled=false

Under systemd (stderr is the journal's stream, $JOURNAL_STREAM) the lines go to stderr with a syslog
priority prefix ("<6>") and no timestamp, which journald adds; otherwise to the state directory's log
file, with a timestamp, and to stderr. `event()` writes the fields; any other message becomes `msg=...`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# syslog priorities, which journald reads from a "<N>" line prefix (SyslogLevelPrefix=yes, the default).
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def kv_value(value: Any) -> str:
    """One value in logfmt: bare when it is one plain word, else a JSON string (quotes, escapes, no newline)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    plain = text and all(c.isprintable() and c not in ' ="\\' for c in text)
    return text if plain else json.dumps(text, ensure_ascii=False)


def kv(fields: Mapping[str, Any]) -> str:
    """`{'job': 3, 'reason': 'window expired'}` -> `job=3 reason="window expired"`; None values left out."""
    return " ".join(f"{k}={kv_value(v)}" for k, v in fields.items() if v is not None)


def event(log: logging.Logger, action: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event: `action=...` and its fields (job, user, reason, ...)."""
    if log.isEnabledFor(level):
        log.log(level, "%s", kv({"action": action, **fields}), extra={"kv": True})


class KeyValueFormatter(logging.Formatter):
    def __init__(self, journald: bool) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        head = {"level": record.levelname.lower(), "daemon": record.name}
        line = kv(head) + " " + (msg if getattr(record, "kv", False) else kv({"msg": msg}))
        if record.exc_info:
            line += " " + kv({"exception": self.formatException(record.exc_info)})
        if self.journald:
            return f"<{_PRIORITY.get(record.levelno, 6)}>{line}"
        # Milliseconds: the CPU manager's quantum is 10 ms, and its events are read against each other.
        return f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d} {line}"


def under_journald(env: Mapping[str, str] = os.environ, stream: Any = sys.stderr) -> bool:
    """Whether `stream` is connected to the journal: $JOURNAL_STREAM names its device:inode (systemd.exec(5))."""
    try:
        dev, ino = (int(x) for x in env.get("JOURNAL_STREAM", "").split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def setup_logging(level: str, path: Path) -> bool:
    """Log to journald when systemd connected stderr to it, else to `path` and stderr; returns whether journald."""
    journald = under_journald()
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if not journald:
        handlers.append(logging.FileHandler(path))
    fmt = KeyValueFormatter(journald)
    for h in handlers:
        h.setFormatter(fmt)
    logging.basicConfig(level=level, handlers=handlers, force=True)
    return journald
