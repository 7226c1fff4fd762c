"""Measurements as readers write them: a byte count in a binary unit (``1.2 GiB``) and seconds as
a phase table shows them (``0.071 s``), for the CLI's tables, ``hpsearch status --trial N``, the
analysis's sentences and the dashboard alike. The record keeps the raw count
(``peak_memory_bytes``); exports write it as it is.

The byte formatter itself lives with the record (``hpsearch.record.format_bytes``), the lowest layer,
so that the trial engine's failure details round a figure as the readers do.

Example:
    >>> format_bytes(512 * 2**20), format_bytes(None), format_seconds(38.46)
    ('512 MiB', '-', '38.5 s')
"""

from __future__ import annotations

from hpsearch.record import format_bytes

__all__ = ["format_bytes", "format_seconds"]


def format_seconds(seconds: float | None) -> str:
    """Seconds as a phase table shows them: milliseconds under 10 s, tenths under 1,000 s.

    Example:
        >>> format_seconds(0.0712), format_seconds(38.46), format_seconds(3723.4), format_seconds(None)
        ('0.071 s', '38.5 s', '3723 s', '-')
    """
    if seconds is None:
        return "-"
    if abs(seconds) < 10:
        return f"{seconds:.3f} s"
    return f"{seconds:.1f} s" if abs(seconds) < 1000 else f"{seconds:.0f} s"

