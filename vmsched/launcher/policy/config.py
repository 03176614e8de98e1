"""Which policy is active: order × start rule × backfilling depth × window-expiry action (SPEC §5).

A spec string names a combination in one word, for config files, the command line and `vmq`:
``POLICY[+BACKFILL[:EXPIRY]][/ORDER]``, e.g. ``fjt+easy:malleable``, ``fcfs+conservative:abort/sjf``;
numeric options in brackets after the policy name, e.g. ``fjt[fjt_long_mpl=1]+easy:abort`` (FJT(1)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

# Start rules (which size, which max MPL, start now or wait). "moldable" is FCFS with the
# percentage-of-request offers of the moldable-deadline paper; "sa-submit"/"sa-start" are the SA request
# selection of Cirne & Berman, once at submission or at every opportunity; the others are thesis ch. 5 §5.4.1.
POLICIES = ("fcfs", "moldable", "asp-max", "psa", "folding", "fjt", "sa-start", "sa-submit")
ORDERS = ("fifo", "sjf", "ljf", "edf")
BACKFILLS = ("none", "easy", "conservative")
EXPIRIES = ("abort", "suspend", "none", "malleable")
# When a backfilled job's window counts as expired: "time" = its window_end has passed (Lifka's EASY);
# "order" = every running job arrived after the head job (thesis §6.4.3); "either"; "auto" = "either"
# for the malleable action (the thesis pairs the two) and "time" otherwise.
WINDOW_RULES = ("auto", "time", "order", "either")

_SPEC = re.compile(
    r"^(?P<policy>[a-z-]+)(?:\[(?P<options>[^\]]*)\])?(?:\+(?P<backfill>[a-z]+)(?::(?P<expiry>[a-z]+))?)?"
    r"(?:/(?P<order>[a-z]+))?$"
)
_NUMERIC = ("asp_max", "fjt_long_mpl", "malleable_mpl", "max_mpl_limit")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 (got {value!r})")


@dataclass(frozen=True)
class PolicyConfig:
    """Policy options. Construction validates; an invalid config cannot exist."""

    policy: str = "fjt"
    order: str = "fifo"
    backfill: str = "easy"
    expiry: str = "malleable"
    # Offers for a job that does not fit at its full request, as fractions of procs[0], each rounded
    # down to an allowed count (moldable-deadline-backfilling paper: 100/80/70/60/50/40 %).
    moldable_percentages: tuple[float, ...] = (1.0, 0.8, 0.7, 0.6, 0.5, 0.4)
    asp_max: float = 0.6  # ASP-MAX: at most this fraction of the machine per job (thesis §5.4.1)
    fjt_long_mpl: int = 4  # FJT: max MPL of long jobs (fig. 5.5; 1 gives the FJT(1) of ch. 6)
    malleable_mpl: int = 4  # expiry "malleable": max MPL given to an expired backfilled job (§6.4.3)
    max_mpl_limit: int = 4  # no policy sets a max MPL above this (folding doubles up to it)
    window_rule: str = "auto"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        _choice("policy", self.policy, POLICIES)
        _choice("order", self.order, ORDERS)
        _choice("backfill", self.backfill, BACKFILLS)
        _choice("expiry", self.expiry, EXPIRIES)
        _choice("window_rule", self.window_rule, WINDOW_RULES)
        pcts = self.moldable_percentages
        if not isinstance(pcts, tuple) or not pcts:
            raise ValueError("moldable_percentages must be a non-empty tuple of fractions")
        if any(isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1 for p in pcts):
            raise ValueError(f"moldable_percentages must lie in (0, 1] (got {pcts})")
        if pcts[0] != 1.0 or any(a <= b for a, b in zip(pcts, pcts[1:], strict=False)):
            raise ValueError(f"moldable_percentages must start at 1.0 and strictly decrease (got {pcts})")
        if isinstance(self.asp_max, bool) or not isinstance(self.asp_max, int | float):
            raise ValueError(f"asp_max must be a fraction in (0, 1] (got {self.asp_max!r})")
        if not 0 < self.asp_max <= 1:
            raise ValueError(f"asp_max must be a fraction in (0, 1] (got {self.asp_max})")
        for name in ("fjt_long_mpl", "malleable_mpl", "max_mpl_limit"):
            _positive_int(name, getattr(self, name))

    @property
    def effective_window_rule(self) -> str:
        if self.window_rule != "auto":
            return self.window_rule
        return "either" if self.expiry == "malleable" else "time"

    def spec(self) -> str:
        """The canonical spec string (what `vmq` shows); parse_policy_spec(cfg.spec()) round-trips."""
        text = self.policy
        default = PolicyConfig()
        changed = [f"{k}={getattr(self, k):g}" for k in _NUMERIC if getattr(self, k) != getattr(default, k)]
        if changed:
            text += f"[{','.join(changed)}]"
        if self.backfill != "none":
            text += f"+{self.backfill}:{self.expiry}"
        return text + f"/{self.order}"


def parse_policy_spec(spec: str, **options: object) -> PolicyConfig:
    """Build a PolicyConfig from ``POLICY[+BACKFILL[:EXPIRY]][/ORDER]`` plus keyword options.

    Parts left out take the defaults, except that no backfilling part means backfill "none".
    """
    match = _SPEC.match(spec.strip().lower())
    if match is None:
        raise ValueError(
            f"bad policy spec {spec!r}; expected POLICY[+BACKFILL[:EXPIRY]][/ORDER], e.g. fjt+easy:malleable"
        )
    parts = {k: v for k, v in match.groupdict().items() if v is not None}
    parts.setdefault("backfill", "none")
    for item in filter(None, (parts.pop("options", "") or "").split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in _NUMERIC:
            raise ValueError(f"unknown policy option {key!r} in {spec!r}; numeric options: {', '.join(_NUMERIC)}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"policy option {key} needs a number, got {value!r}") from None
        parts[key] = int(number) if key != "asp_max" and number.is_integer() else number  # type: ignore[assignment]
    known = {f.name for f in fields(PolicyConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown policy option(s): {', '.join(unknown)}")
    return replace(PolicyConfig(), **{**parts, **options})  # type: ignore[arg-type]
