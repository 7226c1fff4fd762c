"""The digits workload reads scikit-learn's bundled file itself: the same data as
``sklearn.datasets.load_digits``, without importing scikit-learn in every rank process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch


def test_the_digits_are_scikit_learns_own() -> None:
    from sklearn.datasets import load_digits

    from hpsearch.trials.workloads.digits import _bundled_digits, load_digits_split

    pixels, labels = _bundled_digits()
    reference = load_digits()
    assert np.array_equal(pixels, reference.data) and pixels.dtype == reference.data.dtype
    assert np.array_equal(labels, reference.target)
    train, val = load_digits_split(val_fraction=0.2, split_seed=0)
    assert (len(train), len(val)) == (1438, 359)
    x, y = train.tensors
    assert x.shape[1:] == (1, 8, 8) and float(x.max()) == 1.0 and float(x.min()) == 0.0
    assert torch.equal(torch.bincount(torch.cat([y, val.tensors[1]])), torch.from_numpy(np.bincount(reference.target)))


def test_building_the_workload_does_not_import_scikit_learn() -> None:
    code = ("import sys; from hpsearch.trials.workloads.digits import digits_cnn; digits_cnn({}); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
