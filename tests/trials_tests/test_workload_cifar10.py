"""The cifar10 built-in on tiny fake batch files in the standard CIFAR-10 python layout."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import resolve_workload
from hpsearch.trials.workloads.cifar10 import TRAIN_BATCHES, cifar10, load_cifar10

PER_BATCH = 20


def _batch(index: int) -> dict[bytes, object]:
    rng = np.random.default_rng(index)
    data = rng.integers(0, 256, size=(PER_BATCH, 3072), dtype=np.uint8)
    data[0, :] = 255  # a known image: first sample of each batch all white
    labels = [(index + i) % 10 for i in range(PER_BATCH)]
    return {b"batch_label": f"batch {index}".encode(), b"labels": labels, b"data": data,
            b"filenames": [b"x.png"] * PER_BATCH}


@pytest.fixture
def cifar_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for i, name in enumerate((*TRAIN_BATCHES, "test_batch")):
        # Protocol 2, as the published files use.
        (folder / name).write_bytes(pickle.dumps(_batch(i), protocol=2))
    return folder


def test_is_a_builtin() -> None:
    assert resolve_workload("cifar10") is cifar10


def test_loads_shapes_scaling_and_labels(cifar_dir: Path) -> None:
    train_set, val_set = load_cifar10(cifar_dir)
    assert (len(train_set), len(val_set)) == (5 * PER_BATCH, PER_BATCH)
    x, y = train_set[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    assert torch.all(x == 1.0)
    assert float(train_set[1][0].min()) >= 0.0 and float(train_set[1][0].max()) <= 1.0
    assert int(y) == 0 and int(train_set[PER_BATCH + 3][1]) == 4  # batch 1, sample 3
    assert [int(val_set[i][1]) for i in range(3)] == [5, 6, 7]  # test_batch is file index 5
    # Rows are channel-major: the first 1024 bytes are the red plane.
    raw = _batch(1)[b"data"]
    assert isinstance(raw, np.ndarray)
    expected = torch.from_numpy(raw[1].reshape(3, 32, 32).astype(np.float32) / 255.0)
    assert torch.allclose(train_set[PER_BATCH + 1][0], expected)


def test_limit_and_val_source(cifar_dir: Path) -> None:
    train_set, val_set = load_cifar10(cifar_dir, limit=30, val_source="data_batch_1")
    assert len(train_set) == 30 and len(val_set) == PER_BATCH
    assert int(train_set[0][1]) == 1  # data_batch_1 is left out: training starts at data_batch_2
    assert int(val_set[0][1]) == 0


def test_reads_files_pickled_with_the_old_numpy_module_name(cifar_dir: Path) -> None:
    # The published files reference numpy.core.multiarray, renamed numpy._core in numpy 2.
    path = cifar_dir / "data_batch_1"
    original = path.read_bytes()
    assert b"numpy._core.multiarray" in original
    path.write_bytes(original.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    train_set, _ = load_cifar10(cifar_dir)
    assert len(train_set) == 5 * PER_BATCH


def test_missing_folder_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(WorkloadError, match="nowhere"):
        cifar10({"path": str(missing)})


def test_missing_file_names_it(cifar_dir: Path) -> None:
    (cifar_dir / "data_batch_3").unlink()
    with pytest.raises(WorkloadError, match="data_batch_3"):
        load_cifar10(cifar_dir)


@pytest.mark.parametrize(
    "content",
    [b"not a pickle", pickle.dumps([1, 2, 3]), pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}),
     pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}),
     pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}),
     pickle.dumps({b"data": Path("x"), b"labels": [0]})],
)
def test_malformed_file_names_it(cifar_dir: Path, content: bytes) -> None:
    (cifar_dir / "test_batch").write_bytes(content)
    with pytest.raises(WorkloadError, match="test_batch"):
        load_cifar10(cifar_dir)


@pytest.mark.parametrize(
    "options", [{}, {"path": ""}, {"path": "p", "limits": 3}],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        cifar10(options)


def test_bad_limit_and_val_source(cifar_dir: Path) -> None:
    with pytest.raises(WorkloadError, match="limit"):
        cifar10({"path": str(cifar_dir), "limit": 0})
    with pytest.raises(WorkloadError, match="val_source"):
        cifar10({"path": str(cifar_dir), "val_source": "batch_9"})


def test_one_epoch_in_process(cifar_dir: Path) -> None:
    torch.set_num_threads(1)
    spec = TrialSpec(per_device_batch_size=16, base_lr=0.01, base_batch_size=16, epochs=1,
                     workload="cifar10", workload_options={"path": str(cifar_dir), "limit": 64, "channels": 4})
    final = train(spec, RankContext())
    assert final is not None
    assert final["epoch"] == 1 and final["samples_seen"] == 64 and final["steps"] == 4
    assert 0.0 <= final["val_accuracy"] <= 1.0
