"""The example spaces shipped with hpsearch as package data (``examples/*.yaml``)."""

from __future__ import annotations

import pathlib
from importlib import resources

from hpsearch.search_spaces._checks import suggest
from hpsearch.search_spaces.errors import SpaceError

__all__ = ["example_path", "list_examples"]


def _examples_dir() -> pathlib.Path:
    # hpsearch is installed as plain files (wheel or editable), never imported from a zip,
    # so the package's resources are a real directory that users can copy files out of.
    return pathlib.Path(str(resources.files("hpsearch.search_spaces").joinpath("examples")))


def list_examples() -> list[str]:
    """Names of the example spaces shipped with hpsearch, sorted.

    Returns:
        Names without the ``.yaml`` suffix, each accepted by ``example_path``.

    Example:
        >>> "quickstart" in list_examples()  # doctest: +SKIP
        True
    """
    folder = _examples_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file())


def example_path(name: str) -> pathlib.Path:
    """The file of a shipped example space, to load or to copy as a starting point.

    Args:
        name: An example's name as ``list_examples`` gives it (``"quickstart"``); a trailing
            ``.yaml`` is accepted.

    Returns:
        The path of the example's YAML file.

    Raises:
        SpaceError: No example has that name.

    Example:
        >>> space = load_space(example_path("quickstart"))  # doctest: +SKIP
    """
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    names = list_examples()
    # Only names from the listing: a name like "../x" must not reach outside the folder.
    if stem not in names:
        shipped = ", ".join(names) or "none"
        raise SpaceError(
            f"no example space named {stem!r}{suggest(stem, names)} (shipped: {shipped})",
            source="examples",
        )
    return _examples_dir() / f"{stem}.yaml"
