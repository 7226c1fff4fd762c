"""The language-model example (search_spaces/examples/lm.yaml) runs through `hpsearch start` as
shipped: text_lm under AdamW with a warmup from zero, a cosine and clipped gradients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import hpsearch
from hpsearch import record
from hpsearch.search_spaces import example_path


def test_the_lm_example_trains_every_trial_with_a_falling_per_token_loss(tmp_path: Path) -> None:
    # Its first three configurations (b 16 at its three LRs): the whole grid takes about a minute.
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", str(example_path("lm")), "--no-progress",
                             "--n-trials", "3"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    search = hpsearch.load("lm-example", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = [t for t in search.study.get_trials() if t.user_attrs.get(record.ROLE) != "confirmation"]
    assert len(trials) == 3 and {t.state.name for t in trials} == {"COMPLETE"}
    fingerprint = search.study.user_attrs[record.ATTR_DATA_FINGERPRINT]
    assert len(fingerprint["sha256"]) == 64  # the text it trained on, named on the study
    for t in trials:
        attrs = t.user_attrs
        assert t.params["max_grad_norm"] == 1.0 and attrs[record.WARMUP_FROM] == "zero"
        losses = attrs[record.CURVES][record.VAL_LOSS]
        assert losses[-1] < losses[0] - 0.3, losses  # nats per byte, falling
        lrs = attrs[record.CURVES][record.LAST_LR]
        assert lrs[0] < attrs[record.LR] / 2 and max(lrs) <= attrs[record.LR] * (1 + 1e-9)  # from zero, to the peak
        assert attrs["tokens_seen"] == attrs[record.SAMPLES_SEEN] * 64
    # The answer runs as the trials ran: its schedule line says the warmup starts from zero.
    answer = subprocess.run([sys.executable, "-m", "hpsearch", "recommend", "lm-example", "--devices", "1", "--json"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert answer.returncode == 0, answer.stderr
    recommendation = json.loads(answer.stdout)["recommendation"]
    assert recommendation[record.WARMUP_FROM] == "zero"
    assert recommendation["schedule"].startswith(f"warm up from 0 to lr {recommendation['lr']:.4g} over 1 epoch, "
                                                 "then cosine decay to 0 by epoch 4")
