"""A study's trials as files: CSV and JSON, for ``hpsearch export`` and the dashboard's download."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["to_csv", "to_json"]


def to_csv(frame: pd.DataFrame) -> str:
    """The table as CSV, one row per trial; nested attrs (the ``curves``) as JSON text in their cell.

    Example:
        >>> import pandas as pd
        >>> print(to_csv(pd.DataFrame({"number": [0], "curves": [{"samples_seen": [8]}]})), end="")
        number,curves
        0,"{""samples_seen"": [8]}"
    """
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, (dict, list))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v) if isinstance(v, (dict, list)) else v)
    return str(frame.to_csv(index=False))


def to_json(frame: pd.DataFrame) -> str:
    """The table as a JSON array of trials (times in ISO 8601, floats to 15 digits)."""
    return str(frame.to_json(orient="records", date_format="iso", indent=1, double_precision=15))
