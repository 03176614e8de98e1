"""Job scheduling policies of the launcher as pure functions of a snapshot (thesis ch. 5, ch. 6).

`decide(snapshot, cfg)` returns the decisions to apply; `next_event_time(snapshot, cfg)` says when to
call it again if nothing arrives or ends. A policy is a composition: queue order × start rule ×
backfilling depth × window-expiry action, named by a spec such as ``fjt+easy:malleable/fifo``.
"""

from .config import BACKFILLS, EXPIRIES, ORDERS, POLICIES, PolicyConfig, parse_policy_spec
from .core import can_ever_start, decide, next_event_time
from .decisions import Abort, Decision, Mold, Resume, SetMaxMpl, Start, Suspend
from .snapshot import QueuedJob, RunningJob, Snapshot

__all__ = [
    "BACKFILLS",
    "EXPIRIES",
    "ORDERS",
    "POLICIES",
    "Abort",
    "Decision",
    "Mold",
    "PolicyConfig",
    "QueuedJob",
    "Resume",
    "RunningJob",
    "SetMaxMpl",
    "Snapshot",
    "Start",
    "Suspend",
    "can_ever_start",
    "decide",
    "next_event_time",
    "parse_policy_spec",
]
