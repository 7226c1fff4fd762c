"""A study's trials as files: CSV and JSON, for ``hpsearch export`` and the dashboard's download."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hpsearch import record

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["to_csv", "to_json"]

#: Counts written as whole numbers, raw: a column with a gap (a trial that never ran records no
#: peak; a trial of its own is in no fused group) is floats in pandas, and a peak of 1758303748
#: bytes read "1758303748.0", a fused group "1.0".
_COUNTS = (record.PEAK_MEMORY_BYTES, record.FUSED_GROUP, record.FUSED_MEMBERS, record.PER_DEVICE_BATCH_SIZE,
           record.WORLD_SIZE, record.GRAD_ACCUM_STEPS, record.EFFECTIVE_BATCH_SIZE, record.BASE_BATCH_SIZE,
           record.SAMPLES_SEEN, record.EMULATED_RANKS, record.NODES, record.ALLREDUCE_CALLS, record.SEED,
           record.RERUN_OF)


def to_csv(frame: pd.DataFrame) -> str:
    """The table as CSV, one row per trial; nested attrs (the ``curves``) as JSON text in their
    cell; counts (``peak_memory_bytes``, ``fused_group``, batch sizes...) as whole numbers, a
    gap as an empty cell.

    Example:
        >>> import pandas as pd
        >>> print(to_csv(pd.DataFrame({"number": [0], "curves": [{"samples_seen": [8]}]})), end="")
        number,curves
        0,"{""samples_seen"": [8]}"
        >>> print(to_csv(pd.DataFrame({"number": [0, 1], "peak_memory_bytes": [1758303748.0, None]})), end="")
        number,peak_memory_bytes
        0,1758303748
        1,
    """
    frame = _whole_counts(frame)
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, (dict, list))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v) if isinstance(v, (dict, list)) else v)
    return str(frame.to_csv(index=False))


def to_json(frame: pd.DataFrame) -> str:
    """The table as a JSON array of trials (times in ISO 8601, floats to 15 digits, counts as
    whole numbers, as ``to_csv`` writes them).

    Example:
        >>> import pandas as pd
        >>> to_json(pd.DataFrame({"number": [0, 1], "peak_memory_bytes": [1758303748.0, None]})).split()
        ['[', '{', '"number":0,', '"peak_memory_bytes":1758303748', '},', '{', '"number":1,', '"peak_memory_bytes":null', '}', ']']
    """
    return str(_whole_counts(frame).to_json(orient="records", date_format="iso", indent=1, double_precision=15))


def _whole_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with the ``_COUNTS`` columns as nullable integers, where every value is whole."""
    frame = frame.copy()
    for column in _COUNTS:
        if column not in frame.columns:
            continue
        values = frame[column]
        try:
            whole = values.dropna().map(lambda v: float(v).is_integer()).all()
        except (TypeError, ValueError):  # not numbers: left as they are
            continue
        if whole:
            frame[column] = values.astype("Float64").round().astype("Int64")
    return frame
