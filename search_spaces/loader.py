"""Load a space file (or a Python mapping) into a validated ``SearchSpace``.

Validation is hand-written rather than a pydantic model: every rule needs the key path *and*
the source line of the value it rejects, and core rules apply to each choice and bound of a
parameter. Written out, each message states its rule in the user's words.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from hpsearch.search_spaces._checks import check_keys, check_mapping, check_string, fail
from hpsearch.search_spaces._document import (
    Document,
    decode_text,
    document_from_mapping,
    format_key_path,
    parse_document,
    read_text,
)
from hpsearch.search_spaces._parameters import parameter_form, parse_parameters
from hpsearch.search_spaces._sections import (
    TOP_KEYS,
    parse_analysis,
    parse_constraints,
    parse_objectives,
    parse_resources,
    parse_scaling,
    parse_search,
    parse_study,
    parse_tracking,
    parse_workload,
)
from hpsearch.search_spaces.errors import SpaceError
from hpsearch.search_spaces.space import (
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    Objective,
    SearchSpace,
)

__all__ = ["load_space", "parse_space", "space_error", "space_from_mapping"]


def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Read and validate a space file.

    Args:
        path: The YAML file. Its stem is the study name unless the file sets ``study``.

    Returns:
        The validated space, with defaults filled in and the file's text kept in
        ``source_text``.

    Raises:
        SpaceError: The file is missing or unreadable, is not valid YAML, or breaks the
            schema. The message reads ``FILE:LINE at 'key.path': rule, got value``.

    Example:
        >>> space = load_space("space.yaml")  # doctest: +SKIP
        >>> space.search.sampler, list(space.parameters)  # doctest: +SKIP
        ('nsga2', ['per_device_batch_size', 'world_size', ...])
    """
    source = os.fspath(path)
    text = read_text(source)
    return _build(
        parse_document(text, source), default_study=pathlib.Path(source).stem, source_path=source
    )


def parse_space(
    text: str | bytes, *, source: str = "<string>", default_study: str = "space"
) -> SearchSpace:
    """Validate a space given as YAML text.

    Args:
        text: The YAML document (bytes are decoded as UTF-8).
        source: The name errors give for the text, in place of a file name.
        default_study: The study name when the text sets no ``study``.

    Returns:
        The validated space.

    Raises:
        SpaceError: The text is not valid YAML or breaks the schema.

    Example:
        >>> space = parse_space('''
        ... parameters:
        ...   per_device_batch_size: {choices: [8, 32]}
        ...   base_lr: {low: 1.0e-3, high: 1.0e-1, log: true}
        ... ''')
        >>> space.parameters["world_size"]
        Fixed(value=1)
    """
    if isinstance(text, bytes):
        text = decode_text(text, source)
    if not isinstance(text, str):
        raise TypeError(f"text must be str or bytes, got {type(text).__name__}")
    return _build(parse_document(text, source), default_study=default_study, source_path=None)


def space_from_mapping(
    data: Mapping[str, Any], *, source: str = "<mapping>", default_study: str = "space"
) -> SearchSpace:
    """Validate a space given as a Python mapping with the same layout as a space file.

    Parameter values may also be ``Fixed``, ``Choice``, ``FloatRange`` or ``IntRange``
    objects, and objectives ``Objective`` objects; they are checked like the YAML forms.
    Errors carry the key path but no line.

    Args:
        data: The space, e.g. ``{"parameters": {...}, "search": {...}}``.
        source: The name errors give for the mapping.
        default_study: The study name when ``data`` sets no ``study``.

    Returns:
        The validated space; ``source_text`` holds the mapping written out as YAML.

    Raises:
        SpaceError: The mapping breaks the schema.

    Example:
        >>> space = space_from_mapping({
        ...     "parameters": {"per_device_batch_size": 32, "base_lr": 0.1},
        ...     "search": {"n_trials": 4},
        ... })
        >>> space.search.n_trials, space.search.sampler
        (4, 'tpe')
    """
    doc = document_from_mapping(data, source, text=_dump(data))
    return _build(doc, default_study=default_study, source_path=None)


def space_error(space: SearchSpace, path: tuple[str | int, ...], reason: str) -> SpaceError:
    """A ``SpaceError`` at ``path`` of an already validated space, with the file's line when the
    space was read from a file: for the rules checked outside the parser, such as which options
    a workload takes (``hpsearch.workload_check``).

    Example:
        >>> space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, hiden: 4}")
        >>> str(space_error(space, ("parameters", "hiden"), "unknown name"))
        "<space> at 'parameters.hiden': unknown name"
    """
    source = space.source_path or "<space>"
    line = None
    if space.source_path is not None and space.source_text:
        line = parse_document(space.source_text, source).line_of(path)
    return SpaceError(reason, key_path=format_key_path(path), line=line, source=source)


def _dump(data: Any) -> str:
    """The mapping as YAML, for the study record; ``""`` when it holds non-YAML objects."""
    try:
        return yaml.safe_dump(_plain(data), sort_keys=False)
    except yaml.YAMLError:
        return ""


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Objective):
        return {"metric": value.metric, "direction": value.direction}
    if isinstance(value, (Fixed, Choice, FloatRange, IntRange)):
        return _plain(parameter_form(value))
    return value


def _build(doc: Document, *, default_study: str, source_path: str | None) -> SearchSpace:
    root = check_mapping(doc, doc.data, (), what="a space's top level")
    check_keys(doc, root, (), TOP_KEYS)
    if "parameters" not in root:
        fail(
            doc,
            ("parameters",),
            "the space must have a 'parameters' mapping (with per_device_batch_size and base_lr)",
        )
    # Sections are checked in the schema's order, so the first error reported is the one
    # nearest the top of a conventionally ordered file.
    study = parse_study(doc, root, default_study)
    storage = (
        None if root.get("storage") is None else check_string(doc, root["storage"], ("storage",))
    )
    workload = parse_workload(doc, root)
    scaling = parse_scaling(doc, root)
    parameters = parse_parameters(doc, root["parameters"], ("parameters",))
    if "precision" in parameters and isinstance(root.get("workload"), Mapping) \
            and root["workload"].get("precision") is not None:
        fail(doc, ("parameters", "precision"), "precision is set both here and at workload.precision; set it in one "
                                               "place (under parameters to search it)")
    objectives = parse_objectives(doc, root)
    return SearchSpace(
        study=study,
        storage=storage,
        workload=workload,
        scaling=scaling,
        parameters=parameters,
        objectives=objectives,
        search=parse_search(doc, root, objectives, parameters),
        resources=parse_resources(doc, root),
        constraints=parse_constraints(doc, root),
        analysis=parse_analysis(doc, root),
        tracking=parse_tracking(doc, root),
        source_text=doc.text,
        source_path=source_path,
    )
