"""The space parser's errors: its part of the tree in ``hpsearch.errors``, named here for the
code that raises them."""

from __future__ import annotations

from hpsearch.errors import HPSearchError, SpaceError

__all__ = ["HPSearchError", "SpaceError"]
