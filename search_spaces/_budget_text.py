"""How a budget is written: ``search.budget``, the ``--budget`` option, and a duration as
people write it (``format_duration``).

A budget is a wall-clock time, a number of device-hours, or both. The same words work in the
space file and on the command line:

- a wall-clock time: ``40s``, ``90m``, ``2h``, ``1h30m``, ``1.5d`` (a bare number in the space
  file is seconds);
- device-hours: ``1.5dh`` or ``1.5device-hours``;
- both, separated by a comma: ``2h, 4dh``; ``none`` for no limit (``--budget none`` lifts the
  study's budget on ``resume``).

Example:
    >>> parse_budget_text("1h30m, 2.5dh")
    Budget(wall_s=5400.0, device_hours=2.5)
    >>> parse_budget_text("40s").wall_s, parse_budget_text("none").limited
    (40.0, False)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from hpsearch.search_spaces._checks import check_keys, check_number, fail, is_number, show
from hpsearch.search_spaces._document import Document, KeyPath
from hpsearch.search_spaces.errors import SpaceError
from hpsearch.search_spaces.space import Budget

__all__ = ["BUDGET_KEYS", "BUDGET_RULE", "format_duration", "parse_budget", "parse_budget_text"]

#: The keys of a ``search.budget`` mapping.
BUDGET_KEYS = ("wall", "device_hours")

#: How a budget is written, for messages.
BUDGET_RULE = ("a wall-clock time such as 40s, 90m, 2h or 1h30m and/or device-hours such as 1.5dh, "
               "separated by a comma, or 'none'")

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_SECONDS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(rf"(?:\s*{_NUMBER}\s*(?:sec|min|s|m|h|d))+\s*")
_DURATION_PART = re.compile(rf"({_NUMBER})\s*(sec|min|s|m|h|d)")
_DEVICE_HOURS = re.compile(rf"\s*({_NUMBER})\s*(?:dh|device[-_ ]?hours?)\s*")


def parse_duration(value: Any) -> float | None:
    """Seconds of a wall-clock time (``90m``, ``1h30m``, a number of seconds), or ``None`` when
    ``value`` is not one."""
    if is_number(value):
        if isinstance(value, int) and value.bit_length() > 1000:  # float() overflows past ~1e308
            return None
        seconds = float(value)
    elif isinstance(value, str) and _DURATION.fullmatch(value.strip().lower()):
        seconds = sum(float(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(value.lower()))
    else:
        return None
    return seconds if math.isfinite(seconds) else None


def parse_budget_text(text: str, *, source: str = "--budget") -> Budget:
    """A budget written as text (``2h``, ``1.5dh``, ``2h, 4dh``, ``none``).

    Raises:
        SpaceError: ``text`` is not a budget, or a limit is not above 0.
    """
    wall: float | None = None
    device_hours: float | None = None
    parts = [p.strip() for p in str(text).split(",")]
    if [p.lower() for p in parts] == ["none"]:
        return Budget()
    for part in parts:
        hours = _DEVICE_HOURS.fullmatch(part.lower())
        seconds = None if hours else parse_duration(part)
        if hours and device_hours is None:
            device_hours = float(hours.group(1))
            if not (math.isfinite(device_hours) and device_hours > 0):
                raise SpaceError(f"device-hours must be a number > 0, got {show(part)}", source=source)
        elif seconds is not None and wall is None:
            if not seconds > 0:
                raise SpaceError(f"a wall-clock budget must be > 0 s, got {show(part)}", source=source)
            wall = seconds
        else:
            raise SpaceError(f"a budget is {BUDGET_RULE}; got {show(text)}", source=source)
    return Budget(wall_s=wall, device_hours=device_hours)


def parse_budget(doc: Document, raw: Any, path: KeyPath) -> Budget:
    """``search.budget``: ``{wall: 2h, device_hours: 4}``, or the text form (``2h, 4dh``)."""
    if raw is None:
        return Budget()
    if isinstance(raw, str):
        try:
            return parse_budget_text(raw)
        except SpaceError as exc:
            fail(doc, path, exc.reason)
    if not isinstance(raw, Mapping):
        fail(doc, path, f"budget must be {BUDGET_RULE}, or a mapping {{wall: 2h, device_hours: 4}}; got {show(raw)}")
    for key in raw:
        if not isinstance(key, str):
            fail(doc, path + (str(key),), f"keys must be strings, got {show(key)}")
    check_keys(doc, raw, path, BUDGET_KEYS)
    wall = None
    if raw.get("wall") is not None:
        wall = parse_duration(raw["wall"])
        if wall is None:
            fail(doc, path + ("wall",), "wall must be a wall-clock time such as 40s, 90m, 2h or 1h30m "
                                       f"(a number is seconds), got {show(raw['wall'])}")
        if not wall > 0:
            fail(doc, path + ("wall",), f"wall must be > 0 s, got {show(raw['wall'])}")
    device_hours = None
    if raw.get("device_hours") is not None:
        device_hours = check_number(doc, raw["device_hours"], path + ("device_hours",), above=0)
    return Budget(wall_s=wall, device_hours=device_hours)


def format_duration(seconds: float) -> str:
    """A duration as people write it: ``40s``, ``1m30s``, ``2h5m``.

    Example:
        >>> format_duration(40.4), format_duration(90), format_duration(7500)
        ('40s', '1m30s', '2h5m')
    """
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"
