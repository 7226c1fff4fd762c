"""Space text -> plain data plus the line of every key path.

The schema checks work on plain Python data (dicts, lists, scalars). To point an error at a
line, this module composes the YAML into PyYAML's node tree first and records where each key
and list item starts, keyed by its path: ``("parameters", "base_lr", "low") -> 7``.

It also closes the gaps in ``yaml.safe_load`` that would otherwise reach users as silent
surprises or tracebacks: duplicate keys (PyYAML keeps the last one without a word), several
documents in one file, undecodable bytes, integers too long for Python to parse, recursive or
exponentially nested aliases, and ``1e-3`` read as a string (PyYAML follows YAML 1.1 there).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from hpsearch.search_spaces.errors import SpaceError

__all__ = [
    "Document",
    "KeyPath",
    "decode_text",
    "document_from_mapping",
    "format_key_path",
    "parse_document",
    "quote_key",
    "read_text",
]

#: A path into the document: strings are mapping keys, ints are list positions.
KeyPath = tuple[str | int, ...]

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_NULL_TAG = "tag:yaml.org,2002:null"

# A space file has a few dozen nodes. The cap stops a "billion laughs" file (aliases of
# aliases) from expanding into billions of values while we walk it.
_MAX_NODES = 100_000


def format_key_path(path: KeyPath) -> str:
    """Format a key path the way users read it: ``objectives[1].direction``.

    A key that cannot be read back as written (empty, or holding a line break or another
    unprintable character) is shown quoted and escaped, ``workload.'\\r'``: written raw, a key
    such as ``"\\r"`` split the CLI's one ``error:`` line in two, and an empty top-level key
    gave an empty key path, which means "the whole document".
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if part and part.isprintable() else repr(part)
            out += f".{name}" if out else name
    return out


def quote_key(key: Any) -> str:
    """A key for a message, quoted and escaped like ``repr``, long ones shortened: ``'seed'``."""
    text = str(key)
    return repr(text if len(text) <= 60 else text[:60] + "...")


@dataclass(frozen=True)
class Document:
    """Plain data from a space, the source it came from and the line of each key path.

    ``lines`` is empty for a space given as a Python mapping: errors then carry no line.
    """

    data: Any
    source: str
    text: str = ""
    lines: Mapping[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one (a missing key)."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def error(self, reason: str, path: KeyPath) -> SpaceError:
        """A ``SpaceError`` located at ``path``."""
        return SpaceError(
            reason, key_path=format_key_path(path), line=self.line_of(path), source=self.source
        )


class _SpaceLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-3`` and ``1.0e3`` as floats.

    PyYAML implements YAML 1.1, where a float needs a dot and a signed exponent, so
    ``base_lr: {low: 1e-3}`` arrives as the *string* "1e-3" and the user gets a type error for
    a number they wrote correctly. YAML 1.2 and JSON read it as a number; so do we.
    """


_SpaceLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_text(path: str | os.PathLike[str]) -> str:
    """Read a space file as text.

    Raises:
        SpaceError: The file does not exist, is a directory, cannot be read, or is not text.
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except FileNotFoundError:
        raise SpaceError("no such file", source=source) from None
    except IsADirectoryError:
        raise SpaceError("is a directory, not a space file", source=source) from None
    except PermissionError:
        raise SpaceError("cannot read the file: permission denied", source=source) from None
    except OSError as exc:
        raise SpaceError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    return decode_text(raw, source)


def decode_text(raw: bytes, source: str) -> str:
    """Decode a space file's bytes: UTF-8 (with or without BOM), or UTF-16 with a BOM."""
    try:
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            return raw.decode("utf-16")
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        byte = raw[exc.start : exc.start + 1].hex()
        raise SpaceError(
            f"the file must be UTF-8 text, got undecodable byte 0x{byte} (is it a binary file?)",
            line=line,
            source=source,
        ) from None


def parse_document(text: str, source: str) -> Document:
    """Compose one YAML document into plain data and the line of each key path.

    Raises:
        SpaceError: Invalid YAML, an empty document, several documents, duplicate keys,
            non-scalar keys, recursive aliases, or a value PyYAML cannot construct.
    """
    loader: _SpaceLoader | None = None
    try:
        # The constructor already scans the whole text for forbidden characters.
        loader = _SpaceLoader(text)
        try:
            root = loader.get_single_node()
        except yaml.composer.ComposerError as exc:
            if exc.context == "expected a single document in the stream":
                raise SpaceError(
                    "a space file holds one YAML document, found a second one ('---')",
                    line=_mark_line(exc.problem_mark),
                    source=source,
                ) from None
            raise
        # No node at all (only comments), or a bare "---" whose document is an empty null.
        if root is None or (
            isinstance(root, ScalarNode) and root.tag == _NULL_TAG and not root.value
        ):
            raise SpaceError(
                "the space file is empty; it needs at least a 'parameters' mapping",
                line=1,
                source=source,
            )
        walker = _Walker(loader, source, text)
        data = walker.value(root, ())
        walker.lines[()] = root.start_mark.line + 1
        return Document(data=data, source=source, text=text, lines=walker.lines)
    except yaml.MarkedYAMLError as exc:
        raise SpaceError(_yaml_reason(exc), line=_error_line(exc), source=source) from None
    except yaml.reader.ReaderError as exc:
        # Control characters in otherwise valid UTF-8 (binary junk, NUL bytes).
        line = text.count("\n", 0, exc.position) + 1
        raise SpaceError(
            f"the file must be text, got control character #x{exc.character:04x} "
            "(is it a binary file?)",
            line=line,
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        raise SpaceError(f"invalid YAML: {exc}", source=source) from None
    except RecursionError:
        # PyYAML composes nested collections recursively: "[[[[...]]]]" a few hundred deep
        # exhausts the interpreter's stack before any rule could look at it.
        raise SpaceError(
            "lists or mappings are nested too deeply (hundreds of levels)", source=source
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def document_from_mapping(data: Any, source: str, text: str = "") -> Document:
    """Wrap a Python mapping as a ``Document`` without line information."""
    return Document(data=data, source=source, text=text, lines={})


def _mark_line(mark: yaml.Mark | None) -> int | None:
    return None if mark is None else mark.line + 1


def _error_line(exc: yaml.MarkedYAMLError) -> int | None:
    return _mark_line(exc.problem_mark) or _mark_line(exc.context_mark)


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    reason = f"invalid YAML: {exc.problem or exc.context or 'syntax error'}"
    if exc.problem and exc.context:
        where = exc.context_mark
        at = f" at line {where.line + 1}" if where is not None else ""
        reason += f" ({exc.context}{at})"
    if "block" in reason:
        reason += "; check the indentation"
    return reason


class _Walker:
    """Turns a node tree into plain data, recording the line of every key path on the way."""

    def __init__(self, loader: _SpaceLoader, source: str, text: str) -> None:
        self.loader = loader
        self.source = source
        self.text = text
        self.lines: dict[KeyPath, int] = {}
        self._count = 0
        self._active: set[int] = set()  # nodes on the current path: catches recursive aliases
        self._checked: set[int] = set()  # mappings already checked for duplicate keys

    def fail(self, reason: str, path: KeyPath, node: Node) -> SpaceError:
        return SpaceError(
            reason,
            key_path=format_key_path(path),
            line=node.start_mark.line + 1,
            source=self.source,
        )

    def value(self, node: Node, path: KeyPath) -> Any:
        self._count += 1
        if self._count > _MAX_NODES:
            raise self.fail(
                f"the document expands to more than {_MAX_NODES} values (aliases of aliases?)",
                path,
                node,
            )
        if id(node) in self._active:
            raise self.fail(
                "an alias refers to a node that contains it (recursive alias)", path, node
            )
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode) and node.tag == _MAP_TAG:
                return self._mapping(node, path)
            if isinstance(node, SequenceNode) and node.tag == _SEQ_TAG:
                out = []
                for i, item in enumerate(node.value):
                    self.lines[path + (i,)] = item.start_mark.line + 1
                    out.append(self.value(item, path + (i,)))
                return out
            return self._construct(node, path)
        finally:
            self._active.discard(id(node))

    def _construct(self, node: Node, path: KeyPath) -> Any:
        # Scalars and explicitly tagged collections (!!set, !!omap, ...) go through PyYAML's
        # safe constructor; the schema checks then reject what they cannot use.
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            # Unknown or unsafe tags (!!python/object:...), malformed !!set / !!omap.
            raise self.fail(f"unsupported YAML value: {exc.problem}", path, node) from None
        except (ValueError, TypeError) as exc:
            if node.tag == _INT_TAG and isinstance(node, ScalarNode):
                # int() refuses more than 4300 digits (CPython's guard against slow parsing).
                digits = sum(c.isdigit() for c in node.value)
                raise self.fail(
                    f"integers must be reasonably sized, got one with {digits} digits", path, node
                ) from None
            # A !!timestamp such as 2024-02-30 names no real day.
            shown = node.value if isinstance(node, ScalarNode) else node.tag
            if len(shown) > 40:
                shown = shown[:40] + "..."
            raise self.fail(f"cannot read the value {shown!r}: {exc}", path, node) from None

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[Any, Any]:
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._check_duplicates(node, path)
            # Merge keys (<<: *defaults) are resolved like yaml.safe_load does: merged entries
            # first, the mapping's own entries after them, so that its own keys win.
            try:
                self.loader.flatten_mapping(node)
            except yaml.constructor.ConstructorError as exc:
                # Said here, with its key path: otherwise "search: {<<: 1}" is reported as invalid
                # YAML with no key path.
                raise SpaceError(
                    f"a merge key '<<' must name a mapping or a list of mappings ({exc.problem})",
                    key_path=format_key_path(path + ("<<",)),
                    line=_mark_line(exc.problem_mark) or node.start_mark.line + 1,
                    source=self.source,
                ) from None
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node, path)
            key_path = path + (_path_part(key),)
            self.lines[key_path] = key_node.start_mark.line + 1
            out[key] = self.value(value_node, key_path)
        return out

    def _key(self, key_node: Node, path: KeyPath) -> Any:
        if not isinstance(key_node, ScalarNode):
            raise self.fail(
                "mapping keys must be plain values, not lists or mappings", path, key_node
            )
        return self._construct(key_node, path)

    def _check_duplicates(self, node: MappingNode, path: KeyPath) -> None:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node, path)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise self.fail(
                    f"duplicate key {quote_key(_path_part(key))} (first set at line {seen[key]}); "
                    "YAML keeps only the last one, so remove one of them",
                    path + (_path_part(key),),
                    key_node,
                )
            seen[key] = line


def _path_part(key: Any) -> str:
    return key if isinstance(key, str) else str(key)
