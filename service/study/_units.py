"""Measurements as readers write them: a byte count in a binary unit (``1.2 GiB``), for the CLI's
tables, ``hpsearch status --trial N``, the analysis's sentences and the dashboard alike. The
record keeps the raw count (``peak_memory_bytes``); exports write it as it is.
"""

from __future__ import annotations

import math

__all__ = ["format_bytes"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(count: float | None) -> str:
    """A byte count in the largest binary unit it reaches, three significant digits; ``-`` for
    none.

    Example:
        >>> format_bytes(1288490188.8), format_bytes(512 * 2**20), format_bytes(900), format_bytes(None)
        ('1.2 GiB', '512 MiB', '900 B', '-')
    """
    if count is None or not math.isfinite(count):
        return "-"
    value = float(count)
    unit = 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    text = f"{value:.3g}" if unit else f"{value:.0f}"
    if "e" in text:  # 1000-1023 of a unit: four digits read better than 1.02e+03
        text = f"{value:.0f}"
    return f"{text} {_UNITS[unit]}"
