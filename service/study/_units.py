"""Measurements as readers write them: a byte count in a binary unit (``1.2 GiB``), for the CLI's
tables, ``hpsearch status --trial N``, the analysis's sentences and the dashboard alike. The
record keeps the raw count (``peak_memory_bytes``); exports write it as it is.

The formatter itself lives with the record (``hpsearch.record.format_bytes``), the lowest layer,
so that the trial engine's failure details round a figure as the readers do.

Example:
    >>> format_bytes(512 * 2**20), format_bytes(None)
    ('512 MiB', '-')
"""

from __future__ import annotations

from hpsearch.record import format_bytes

__all__ = ["format_bytes"]
