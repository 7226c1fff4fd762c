"""A small decoder-only transformer language model on the Python standard library's own source.

The text is read at run time from the ``.py`` files of the interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``): nothing is downloaded, and every machine with the same
Python has the same text. The files are pinned by name (``TRAIN_FILES``, ``VAL_FILES``), and the
split is by file, so it does not move when an option changes. Each build hashes the whole pin
(``text_fingerprint``): the workload carries that hash as its ``data_fingerprint``, the study
records it when the search starts, and a resume or a rank whose Python ships other text refuses
to train on it silently.

Tokens are UTF-8 bytes (``level: byte``, a vocabulary of 256) or the characters of the pinned
text (``level: char``, its sorted set). Samples are non-overlapping windows of ``context + 1``
tokens: the first ``context`` are the input, the last ``context`` the next-token targets. The
loss is the mean cross-entropy per token, so ``train_loss`` and ``val_loss`` are per token and
``val_accuracy`` is next-token accuracy over every target position.
"""

from __future__ import annotations

import hashlib
import math
import platform
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options

__all__ = ["PINNED_FILES", "TRAIN_FILES", "VAL_FILES", "TextData", "TinyTransformer", "stdlib_dir", "text_data",
           "text_fingerprint", "text_lm"]

#: The training files, in the order they are used (``files: N`` takes the first N). Pure-Python
#: modules present, as single files, in CPython 3.10 to 3.13 (none of PEP 594's removals, none
#: that became a package).
TRAIN_FILES: tuple[str, ...] = (
    "abc.py", "bisect.py", "calendar.py", "cmd.py", "code.py", "codeop.py", "colorsys.py", "copy.py", "csv.py",
    "filecmp.py", "fileinput.py", "fnmatch.py", "gettext.py", "glob.py", "graphlib.py", "hmac.py", "keyword.py",
    "linecache.py", "numbers.py", "operator.py", "py_compile.py", "queue.py", "quopri.py", "rlcompleter.py",
    "secrets.py", "shlex.py", "stat.py", "symtable.py", "tabnanny.py", "textwrap.py", "timeit.py", "token.py",
    "types.py", "zipapp.py",
)
#: The validation files: never trained on, whatever ``files`` says (``val_files: N`` takes the first N).
VAL_FILES: tuple[str, ...] = ("getopt.py", "netrc.py", "reprlib.py", "sched.py")
#: Every pinned file, sorted: what the fingerprint hashes and the character vocabulary is drawn from.
PINNED_FILES: tuple[str, ...] = tuple(sorted(TRAIN_FILES + VAL_FILES))

_LEVELS = ("byte", "char")
_DEFAULT_FILES = 8
#: The options the data depend on; the model's are the rest.
_DATA = ("context", "level", "files", "val_files")
_KNOWN = ("layers", "width", "heads", "dropout", *_DATA)


class TextData(NamedTuple):
    """What ``text_data`` builds: the windows, the vocabulary's size and the pin's hash."""

    train: TensorDataset
    val: TensorDataset
    vocab_size: int
    fingerprint: str


def stdlib_dir() -> Path:
    """The folder of this interpreter's standard library, where the pinned files are read."""
    return Path(sysconfig.get_paths()["stdlib"])


def _read_pinned() -> dict[str, bytes]:
    """Every pinned file's bytes, by name, in ``PINNED_FILES`` order.

    Raises:
        WorkloadError: a pinned file is missing (another Python's standard library).
    """
    folder = stdlib_dir()
    texts: dict[str, bytes] = {}
    for name in PINNED_FILES:
        try:
            texts[name] = (folder / name).read_bytes()
        except OSError as exc:
            raise WorkloadError(
                f"text_lm reads the Python standard library's own source, and pinned file {name!r} is missing "
                f"from {folder} (Python {platform.python_version()}): {exc.strerror or exc}; text_lm pins files "
                "present in CPython 3.10 to 3.13") from None
    return texts


def text_fingerprint(texts: Mapping[str, bytes]) -> str:
    """The sha256 of the pinned text: each file's name, size and bytes, in ``PINNED_FILES``
    order. The same on every machine whose Python ships the same files.

    Example:
        >>> text_fingerprint({name: b"" for name in PINNED_FILES})[:12]
        '521c46dc5665'
    """
    digest = hashlib.sha256()
    for name in PINNED_FILES:
        data = texts[name]
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _int(options: Mapping[str, Any], name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or \
            (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise WorkloadError(f"text_lm option {name!r} must be an integer {bound}, got {value!r}")
    return value


def _level(options: Mapping[str, Any]) -> str:
    level = options.get("level", "byte")
    if level not in _LEVELS:
        raise WorkloadError(f"text_lm option 'level' must be one of {', '.join(_LEVELS)}, got {level!r}")
    return str(level)


def _windows(tokens: list[int], context: int, what: str) -> TensorDataset:
    """Non-overlapping windows of ``context + 1`` tokens as (inputs, next-token targets)."""
    n = len(tokens) // (context + 1)
    if n < 1:
        raise WorkloadError(f"text_lm: the {what} text holds {len(tokens)} tokens, fewer than one window of "
                            f"context + 1 = {context + 1}; lower context or use more files")
    windows = torch.tensor(tokens[: n * (context + 1)], dtype=torch.int64).reshape(n, context + 1)
    return TensorDataset(windows[:, :-1].contiguous(), windows[:, 1:].contiguous())


def text_data(options: Mapping[str, Any]) -> TextData:
    """The training and validation windows ``text_lm`` trains on for these options.

    Example:
        >>> data = text_data({"context": 32, "files": 2, "val_files": 1})
        >>> data.vocab_size, tuple(data.train[0][0].shape), data.train[0][0].dtype
        (256, (32,), torch.int64)
    """
    context = _int(options, "context", 64, 1)
    level = _level(options)
    files = _int(options, "files", _DEFAULT_FILES, 1, len(TRAIN_FILES))
    val_files = _int(options, "val_files", len(VAL_FILES), 1, len(VAL_FILES))
    texts = _read_pinned()
    fingerprint = text_fingerprint(texts)
    if level == "byte":
        vocab_size = 256

        def encode(name: str) -> list[int]:
            return list(texts[name])
    else:
        decoded = {name: data.decode("utf-8") for name, data in texts.items()}
        # The vocabulary is the whole pin's, so validation has no unknown character whatever
        # the options; it depends on the text, which the fingerprint names.
        chars = sorted(set().union(*(set(text) for text in decoded.values())))
        index = {c: i for i, c in enumerate(chars)}
        vocab_size = len(chars)

        def encode(name: str) -> list[int]:
            return [index[c] for c in decoded[name]]

    train_tokens = [t for name in TRAIN_FILES[:files] for t in encode(name)]
    val_tokens = [t for name in VAL_FILES[:val_files] for t in encode(name)]
    return TextData(_windows(train_tokens, context, "training"), _windows(val_tokens, context, "validation"),
                    vocab_size, fingerprint)


class _Attention(nn.Module):
    """Causal multi-head self-attention, written out (matmul, mask, softmax) rather than with
    ``scaled_dot_product_attention``: under ``torch.func.vmap`` (fused trials) torch 2.13 has
    no batching rule for SDPA's CPU kernel and runs it member by member, with a warning."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        h = self.heads
        q, k, v = (part.reshape(n, t, h, c // h).transpose(1, 2) for part in self.qkv(x).split(c, dim=2))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = self.attn_drop(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(n, t, c)
        out: torch.Tensor = self.resid_drop(self.proj(y))
        return out


class _Block(nn.Module):
    """Pre-LayerNorm: attention, then a GELU MLP of 4 x width, each added to the residual."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = _Attention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyTransformer(nn.Module):
    """A decoder-only transformer: token and learned position embeddings, ``layers`` pre-LN
    blocks, a final LayerNorm and an untied linear head.

    ``forward(ids)`` takes ``(N, T)`` token ids (T at most ``context``) and returns logits of
    shape ``(N, vocab, T)``: classes on dimension 1, as ``torch.nn.functional.cross_entropy``
    takes them (the engine's accuracy reads them there too). ``.transpose(1, 2)`` gives the
    usual ``(N, T, vocab)``.
    """

    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(_Block(width, heads, dropout) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for module in self.modules():  # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[-1]
        x = self.drop(self.tok(ids) + self.pos(torch.arange(t, device=ids.device)))
        logits: torch.Tensor = self.head(self.ln_f(self.blocks(x)))
        return logits.transpose(1, 2)


@takes_options(*_KNOWN)
@builds_data(text_data, options=_DATA)
def text_lm(options: Mapping[str, Any], data: TextData) -> Workload:
    """A small decoder-only transformer learning the next token of Python's own source.

    Options:
        layers (int, 2): transformer blocks.
        width (int, 64): the residual stream's width (the MLP has 4 x width).
        heads (int, 4): attention heads; must divide ``width``.
        context (int, 64): tokens per sample (the model's context length).
        level ("byte" or "char", "byte"): tokens are UTF-8 bytes (vocabulary 256) or the
            characters of the pinned text (its sorted set).
        files (int, 8): how many of ``TRAIN_FILES`` to train on, from the first.
        val_files (int, 4): how many of ``VAL_FILES`` to validate on, from the first.
        dropout (float, 0.0): after the embeddings, on the attention weights and on each
            block's two outputs.
    """
    layers = _int(options, "layers", 2, 0)
    width = _int(options, "width", 64, 1)
    heads = _int(options, "heads", 4, 1)
    context = _int(options, "context", 64, 1)
    if width % heads:
        raise WorkloadError(f"text_lm option 'heads' must divide width {width}, got {heads}")
    dropout = options.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise WorkloadError(f"text_lm option 'dropout' must be in [0, 1), got {dropout!r}")
    model = TinyTransformer(data.vocab_size, context, width, layers, heads, float(dropout))
    return Workload(model, data.train, data.val, nn.CrossEntropyLoss(), "mean", num_classes=data.vocab_size,
                    data_fingerprint=data.fingerprint, tokens_per_sample=context)
