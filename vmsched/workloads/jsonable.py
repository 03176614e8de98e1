"""Turn the package's dataclasses into JSON-ready plain data."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Dataclasses become dicts (fields starting with ``_`` left out), mapping keys become strings
    (``10.0`` -> ``"10"``), tuples become lists, and non-finite floats become ``null``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if not f.name.startswith("_")
        }
    if isinstance(value, Mapping):
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def _key(key: Any) -> str:
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    return str(key)
