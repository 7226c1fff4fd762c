"""Settings, resolved once with one precedence rule: explicit argument (CLI flag) > environment
variable > space file > default.

This is the only module that reads environment variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hpsearch.store import sqlite_file as sqlite_file_of

__all__ = ["DEFAULT_STORAGE", "SETTINGS_DOC", "Settings", "default_runs_dir", "resolve_settings", "study_runs_dir"]

DEFAULT_STORAGE = "sqlite:///hpsearch.db"

#: name -> (environment variable, default, help). Drives ``resolve_settings`` and the docs.
SETTINGS_DOC: dict[str, tuple[str, str | None, str]] = {
    "storage": ("HPSEARCH_STORAGE", DEFAULT_STORAGE,
                "Study store: an SQLAlchemy URL (SQLite file by default, PostgreSQL for clusters)."),
    "ray_address": ("RAY_ADDRESS", None,
                    "Ray cluster to join; unset starts a local Ray for the search."),
    "runs_dir": ("HPSEARCH_RUNS_DIR", None,
                 "Folder for Ray Tune's state and each trial's files; default: 'hpsearch_runs' "
                 "beside the SQLite file, or in the working folder."),
    "store_patience_s": ("HPSEARCH_STORE_PATIENCE_S", "300",
                         "How long a search waits for an unreachable store (a database restart) "
                         "before it stops; finished trials are kept and 'hpsearch resume' goes on."),
    "mlflow": ("MLFLOW_TRACKING_URI", None,
               "MLflow tracking URI the search also logs its trials to (tracking.mlflow in the space "
               "file; docs/tracking.md); unset: no MLflow."),
}


@dataclass(frozen=True)
class Settings:
    """Resolved settings for one command or API call."""

    storage: str = DEFAULT_STORAGE
    ray_address: str | None = None
    runs_dir: str | None = None
    store_patience_s: str = "300"
    mlflow: str | None = None


def resolve_settings(file_values: dict[str, str | None] | None = None, **explicit: str | None) -> Settings:
    """Resolve every setting: ``explicit`` (not None) > environment > ``file_values`` > default.

    Example:
        >>> resolve_settings(storage="sqlite:///x.db").storage
        'sqlite:///x.db'
    """
    file_values = file_values or {}
    values: dict[str, Any] = {}
    for f in fields(Settings):
        env_name, default, _ = SETTINGS_DOC[f.name]
        for candidate in (explicit.get(f.name), os.environ.get(env_name) or None, file_values.get(f.name), default):
            if candidate is not None:
                values[f.name] = str(candidate)
                break
        else:
            values[f.name] = None
    return Settings(**values)


def default_runs_dir(settings: Settings, sqlite_file: Path | None) -> Path:
    """Where Tune's state and trial files go when ``runs_dir`` is not set: beside the SQLite
    file, else in the working folder (never ``~/ray_results``)."""
    if settings.runs_dir:
        return Path(settings.runs_dir).resolve()
    base = sqlite_file.parent if sqlite_file is not None else Path.cwd()
    return (base / "hpsearch_runs").resolve()


def study_runs_dir(settings: Settings, study: str) -> Path:
    """The folder a study's searches write into (Tune's state, each trial's run folder with its
    logs and saved weights): ``<runs_dir>/<study>`` (``default_runs_dir``).

    Example:
        >>> study_runs_dir(Settings(storage="sqlite:////data/hp.db"), "my-study").as_posix()
        '/data/hpsearch_runs/my-study'
    """
    return default_runs_dir(settings, sqlite_file_of(settings.storage)) / study
