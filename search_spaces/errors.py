"""The hpsearch exception tree.

It is rooted here, in the lowest layer, so that every layer (search_spaces <- trials <- service)
can raise its own part of it without importing upward. ``hpsearch.errors`` re-exports the whole
tree; users catch ``hpsearch.HPSearchError``.

Each class carries the exit code the CLI returns and the HTTP status the web app answers with.
They are translated in three places only: the CLI, the web app and the trial driver.
"""

from __future__ import annotations

__all__ = ["HPSearchError", "SpaceError"]


class HPSearchError(Exception):
    """Base class of every error hpsearch raises on purpose.

    Attributes:
        exit_code: The CLI's exit status for this error.
        http_status: The web app's response status for this error.
    """

    exit_code: int = 1
    http_status: int = 500


class SpaceError(HPSearchError, ValueError):
    """A space file (or mapping) breaks the schema.

    The message names the key path (``parameters.base_lr.low``) and, when the space came from
    text, the file and line, so the user can go straight to the mistake.

    Attributes:
        key_path: Dotted path to the offending key, ``""`` for the whole document.
        line: 1-based line in the source text, or ``None`` when unknown.
        source: The file name (or ``"<string>"``) the space came from.
        reason: The rule that was broken, without location.
    """

    exit_code = 2
    http_status = 400

    def __init__(
        self,
        reason: str,
        *,
        key_path: str = "",
        line: int | None = None,
        source: str = "<string>",
    ) -> None:
        self.reason = reason
        self.key_path = key_path
        self.line = line
        self.source = source
        where = source if line is None else f"{source}:{line}"
        what = f" at '{key_path}'" if key_path else ""
        super().__init__(f"{where}{what}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its fields: the default (the message as the only argument) would put a
        # second location in front of it. A search checks its workload in another process and
        # raises the error that process sent back.
        return _rebuilt, (type(self), self.reason, self.key_path, self.line, self.source)


def _rebuilt(cls: type[SpaceError], reason: str, key_path: str, line: int | None, source: str) -> SpaceError:
    return cls(reason, key_path=key_path, line=line, source=source)
