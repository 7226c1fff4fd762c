"""The keys of packing and memory: ``resources.gpus_per_worker`` as a share of a GPU,
``emulate_ranks`` and ``mps`` (``auto | on | off``), ``memory_per_worker`` as a size, and
``search.on_oom``; each wrong value names its key path and line, and ``validate --json`` shows
every default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.search_spaces import SpaceError, parse_space

# Lines 1-3; the resources or search section is line 4.
BASE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


def error_of(text: str) -> SpaceError:
    with pytest.raises(SpaceError) as caught:
        parse_space(BASE + text, source="space.yaml")
    return caught.value


@pytest.mark.parametrize(("written", "share"), [(0.5, 0.5), (0.25, 0.25), (0.125, 0.125), (0.2, 0.2),
                                                (0.3333, 1 / 3), (1, 1.0), (2, 2.0), (1.0, 1.0)])
def test_gpus_per_worker_takes_whole_gpus_and_shares_that_divide_one(written: float, share: float) -> None:
    resources = parse_space(BASE + f"resources: {{gpus_per_worker: {written}}}\n").resources

    assert resources.gpus_per_worker == share
    assert isinstance(resources.gpus_per_worker, float)


@pytest.mark.parametrize(("written", "fragment"), [
    ("0.3", "must be a share that divides one GPU evenly, 1/k (0.5, 0.25, 0.2, 0.125...)"),
    ("0.75", "must be a share that divides one GPU evenly"),
    ("1.5", "above 1 must be a whole number of GPUs"),
    ("-0.5", "must be >= 0"),
    ("0.01", "at least 1/64 of a GPU"),
    ("'half'", "must be a number of GPUs"),
    ("true", "must be a number of GPUs"),
])
def test_a_share_of_a_gpu_that_does_not_divide_it_is_refused_with_the_rule(written: str, fragment: str) -> None:
    error = error_of(f"resources: {{gpus_per_worker: {written}}}\n")

    assert (error.key_path, error.line) == ("resources.gpus_per_worker", 4)
    assert fragment in error.reason


def test_a_share_of_a_gpu_with_device_cpu_is_refused_and_cpu_reserves_none() -> None:
    error = error_of("resources: {device: cpu, gpus_per_worker: 0.5}\n")

    assert error.key_path == "resources.gpus_per_worker" and "0 with device 'cpu'" in error.reason
    assert parse_space(BASE + "resources: {device: cpu}\n").resources.gpus_per_worker == 0


@pytest.mark.parametrize("key", ["emulate_ranks", "mps"])
@pytest.mark.parametrize(("written", "setting"), [("auto", "auto"), ("on", "on"), ("off", "off"), ("'on'", "on"),
                                                  ("'off'", "off"), ("true", "on"), ("false", "off")])
def test_switches_take_auto_on_off_and_true_false(key: str, written: str, setting: str) -> None:
    resources = parse_space(BASE + f"resources: {{{key}: {written}}}\n").resources

    assert getattr(resources, key) == setting


@pytest.mark.parametrize("key", ["emulate_ranks", "mps"])
def test_a_switch_outside_auto_on_off_is_refused_with_a_suggestion(key: str) -> None:
    error = error_of(f"resources: {{{key}: Auto}}\n")

    assert (error.key_path, error.line) == (f"resources.{key}", 4)
    assert error.reason == (f"{key} must be one of 'auto', 'on', 'off' (true and false mean 'on' and 'off'), "
                            "got 'Auto'; did you mean 'auto'?")


def test_mps_on_with_device_cpu_is_refused() -> None:
    error = error_of("resources: {device: cpu, mps: on}\n")

    assert error.key_path == "resources.mps" and "device 'cpu'" in error.reason


@pytest.mark.parametrize(("written", "size"), [("1.5GiB", 1536 * 2**20), ("512MiB", 512 * 2**20),
                                               ("2GB", 2 * 10**9), ("'600 MiB'", 600 * 2**20),
                                               ("2gib", 2 * 2**30), ("1048576", 2**20), ("2.0e9", 2 * 10**9)])
def test_memory_per_worker_is_a_size_in_bytes(written: str, size: int) -> None:
    assert parse_space(BASE + f"resources: {{memory_per_worker: {written}}}\n").resources.memory_per_worker == size


@pytest.mark.parametrize(("written", "fragment"), [
    ("2gigs", "the unit must be one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"),
    ("3MBs", "did you mean 'MB'?"),
    ("1.5", "got a number: 1.5"),
    ("[1]", "got a list"),
    ("100KB", "must be at least 1MiB"),
    ("-1", "must be at least 1MiB"),
])
def test_a_memory_per_worker_that_is_not_a_size_is_refused(written: str, fragment: str) -> None:
    error = error_of(f"resources: {{memory_per_worker: {written}}}\n")

    assert (error.key_path, error.line) == ("resources.memory_per_worker", 4)
    assert fragment in error.reason


def test_memory_per_worker_with_device_cuda_says_the_gpus_memory_is_the_limit() -> None:
    error = error_of("resources: {device: cuda, memory_per_worker: 1GiB}\n")

    assert error.key_path == "resources.memory_per_worker"
    assert "with device 'cuda' the GPU's own memory is the limit" in error.reason


def test_on_oom_is_skip_or_accumulate() -> None:
    assert parse_space(BASE + "search: {on_oom: accumulate}\n").search.on_oom == "accumulate"
    error = error_of("search: {on_oom: acumulate}\n")
    assert (error.key_path, error.line) == ("search.on_oom", 4)
    assert "must be one of 'skip', 'accumulate'" in error.reason and "did you mean 'accumulate'?" in error.reason


def _hpsearch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True)


def test_validate_json_shows_the_defaults_of_the_new_keys(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(BASE)

    result = _hpsearch("validate", str(space), "--json")

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["resources"] == {"device": "auto", "cpus_per_worker": 1, "gpus_per_worker": 1.0,
                                 "emulate_ranks": "auto", "span_nodes": "auto", "reuse_workers": True, "mps": "auto",
                                 "memory_per_worker": None}
    assert data["search"]["on_oom"] == "skip"


def test_validate_refuses_a_share_that_does_not_divide_a_gpu_in_one_line(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(BASE + "resources: {device: cuda, gpus_per_worker: 0.3}\n")

    result = _hpsearch("validate", str(space))

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: {space}:4 at 'resources.gpus_per_worker': gpus_per_worker below 1 must be a share that divides one "
        "GPU evenly, 1/k (0.5, 0.25, 0.2, 0.125...), so that k ranks fill it; got 0.3, which is 1/3.33"]
