"""The package laid out as it installs (``hpsearch/...``), for tools that read source trees.

The user's folders map onto one import namespace through setuptools' ``package-dir``
(``service/`` is ``hpsearch``, ``trials/`` is ``hpsearch.trials``...). An editable install
serves that mapping with an import hook, which static tools do not follow: mypy and
import-linter look for ``hpsearch/trials/`` on disk and find nothing. This module builds a tree
of symbolic links in the installed layout from pyproject's own mapping, and runs those tools on
it, with their messages pointing back at the real files:

    python tests/linktree.py mypy [DEST]       # type-check ([tool.mypy] in pyproject.toml)
    python tests/linktree.py imports [DEST]    # the import contracts ([tool.importlinter])

``tests/test_architecture.py`` runs the import contracts in the test suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: Where the tree is built by default (``build/`` is ignored by git).
DEFAULT_DEST = ROOT / "build" / "linktree"
_SOURCES = {".py", ".pyi", ".typed"}


def build(dest: Path = DEFAULT_DEST) -> dict[Path, Path]:
    """Build the tree under ``dest`` (anew); returns each link's path -> its source file."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    if dest.exists():
        shutil.rmtree(dest)
    links: dict[Path, Path] = {}
    for package in setuptools["packages"]:
        source = ROOT / _source_dir(package, mapping)
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for file in sorted(source.iterdir()):
            if file.is_file() and file.suffix in _SOURCES:
                link = target / file.name
                os.symlink(file, link)
                links[link] = file
    return links


def _source_dir(package: str, mapping: dict[str, str]) -> str:
    """The folder of ``package`` under pyproject's ``package-dir`` (its nearest mapped parent)."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        parent = ".".join(parts[:i])
        if parent in mapping:
            return "/".join([mapping[parent], *parts[i:]])
    return "/".join(parts)


def _to_sources(text: str, links: dict[Path, Path]) -> str:
    """Tool output with each link's path replaced by its source's, relative to the checkout."""
    by_name = {str(link): str(src.relative_to(ROOT)) for link, src in links.items()}
    by_name.update({os.path.relpath(link, ROOT): str(src.relative_to(ROOT)) for link, src in links.items()})
    pattern = re.compile("|".join(re.escape(k) for k in sorted(by_name, key=len, reverse=True)))
    return pattern.sub(lambda m: by_name[m[0]], text) if by_name else text


def run(tool: str, dest: Path = DEFAULT_DEST) -> int:
    """Run ``mypy`` or ``imports`` (import-linter) on a fresh tree; returns the exit status."""
    links = build(dest)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(dest), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if tool == "mypy":
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                   "-p", "hpsearch"]
        env["MYPYPATH"] = str(dest)
    elif tool == "imports":
        command = [str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / "pyproject.toml"),
                   "--no-cache"]
    else:
        raise SystemExit(f"usage: python tests/linktree.py mypy|imports (got {tool!r})")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(_to_sources(done.stdout, links))
    sys.stderr.write(_to_sources(done.stderr, links))
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1] if len(sys.argv) > 1 else "",
                         Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_DEST))
