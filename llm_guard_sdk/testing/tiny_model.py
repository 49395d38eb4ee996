"""Build a tiny random-weight Llama model with a locally trained tokenizer.

The model is meant for tests and benchmarks that need a *real* inference engine
(vLLM on CPU) but not meaningful text. Everything is produced offline:

* a byte-level BPE tokenizer trained with ``tokenizers`` on a small built-in
  English corpus (:mod:`llm_guard_sdk.testing.tiny_tokenizer`);
* a ``LlamaConfig`` (hidden 128, intermediate 256, 2 layers, 4 heads, 4 KV heads,
  head dim 32, vocab = ``len(tokenizer)``, float32) with seeded random weights
  saved as safetensors by ``transformers``.

Usage::

    python -m llm_guard_sdk.testing.tiny_model /tmp/tiny-llama

Importing this module is cheap: torch, transformers and tokenizers are imported
inside the functions that need them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from .tiny_tokenizer import CHAT_TEMPLATE, special_ids, train_tokenizer, write_json

__all__ = [
    "CHAT_TEMPLATE",
    "MARKER_FILE",
    "build_tiny_model",
    "default_model_dir",
    "ensure_tiny_model",
    "main",
]

#: Written last; its presence (with matching parameters) means the model is complete.
MARKER_FILE = ".llm-guard-tiny-model.json"

#: Bump when the on-disk layout or architecture changes, so stale caches are rebuilt.
_FORMAT_VERSION = 1

# Architecture. Head dim = 128 / 4 = 32, which vLLM's CPU attention supports.
_HIDDEN_SIZE = 128
_INTERMEDIATE_SIZE = 256
_NUM_LAYERS = 2
_NUM_HEADS = 4
_NUM_KV_HEADS = 4
_DTYPE = "float32"


def default_model_dir() -> pathlib.Path:
    """Return the cache directory for the tiny model.

    ``$LLM_GUARD_CACHE_DIR/tiny-llama`` if that variable is set, otherwise
    ``~/.cache/llm-guard-sdk/tiny-llama``.
    """
    root = os.environ.get("LLM_GUARD_CACHE_DIR")
    base = pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "llm-guard-sdk"
    return base / "tiny-llama"


def _marker_payload(
    seed: int, vocab_size_target: int, max_position_embeddings: int
) -> dict[str, Any]:
    return {
        "format_version": _FORMAT_VERSION,
        "seed": seed,
        "vocab_size_target": vocab_size_target,
        "max_position_embeddings": max_position_embeddings,
    }


def _is_complete(directory: pathlib.Path, expected: dict[str, Any]) -> bool:
    marker = directory / MARKER_FILE
    try:
        payload = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(payload, dict):
        return False
    return all(payload.get(key) == value for key, value in expected.items())


@contextlib.contextmanager
def _offline_env() -> Iterator[None]:
    """Force the Hugging Face libraries offline while building."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    saved = {key: os.environ.get(key) for key in keys}
    for key in keys:
        os.environ[key] = "1"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _build_weights(
    out_dir: pathlib.Path, *, seed: int, vocab_size: int, max_position_embeddings: int
) -> None:
    import importlib

    import torch

    # transformers is only partially typed; treat it as Any.
    hf: Any = importlib.import_module("transformers")
    hf_logging: Any = importlib.import_module("transformers.utils.logging")

    ids = special_ids(out_dir)
    config = hf.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=_HIDDEN_SIZE,
        intermediate_size=_INTERMEDIATE_SIZE,
        num_hidden_layers=_NUM_LAYERS,
        num_attention_heads=_NUM_HEADS,
        num_key_value_heads=_NUM_KV_HEADS,
        head_dim=_HIDDEN_SIZE // _NUM_HEADS,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=False,
        dtype=_DTYPE,
    )
    config.architectures = ["LlamaForCausalLM"]

    torch.manual_seed(seed)
    model = hf.LlamaForCausalLM(config)
    model.to(dtype=getattr(torch, _DTYPE))
    model.eval()
    model.generation_config = hf.GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    )
    progress_was_enabled = bool(hf_logging.is_progress_bar_enabled())
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(out_dir), safe_serialization=True)
    finally:
        if progress_was_enabled:
            hf_logging.enable_progress_bar()


def build_tiny_model(
    directory: str | os.PathLike[str],
    *,
    seed: int = 0,
    vocab_size_target: int = 512,
    max_position_embeddings: int = 2048,
) -> pathlib.Path:
    """Build (or reuse) a tiny random-weight Llama model in ``directory``.

    Idempotent: when ``directory`` already holds a complete model built with the
    same parameters (see :data:`MARKER_FILE`), it returns immediately. Files are
    produced in a temporary sibling directory and moved in, marker last, so a
    crashed build never looks complete.

    Args:
        directory: Where to put ``config.json``, ``model.safetensors`` and the
            tokenizer files. Created if missing.
        seed: Seed for the random weights.
        vocab_size_target: Target BPE vocabulary size (including the 256 byte
            symbols and 4 special tokens). The model's ``vocab_size`` is set to the
            actual ``len(tokenizer)``.
        max_position_embeddings: Maximum sequence length the model supports.

    Returns:
        The absolute path of ``directory``.

    """
    if vocab_size_target < 260 + 1:
        raise ValueError("vocab_size_target must exceed 260 (256 bytes + 4 special tokens)")
    target = pathlib.Path(directory).expanduser().resolve()
    expected = _marker_payload(seed, vocab_size_target, max_position_embeddings)
    if _is_complete(target, expected):
        return target

    target.mkdir(parents=True, exist_ok=True)
    with _offline_env():
        staging = pathlib.Path(tempfile.mkdtemp(prefix=".tiny-llama-build-", dir=target.parent))
        try:
            vocab_size = train_tokenizer(staging, vocab_size_target, max_position_embeddings)
            _build_weights(
                staging,
                seed=seed,
                vocab_size=vocab_size,
                max_position_embeddings=max_position_embeddings,
            )
            (target / MARKER_FILE).unlink(missing_ok=True)
            for item in sorted(staging.iterdir()):
                os.replace(item, target / item.name)
            write_json(target / MARKER_FILE, {**expected, "vocab_size": vocab_size})
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_tiny_model(directory: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Return a ready tiny model, building it in ``directory`` (or the cache) if needed."""
    return build_tiny_model(directory if directory is not None else default_model_dir())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: build the model and print its path."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_guard_sdk.testing.tiny_model",
        description="Build a tiny random-weight Llama model (offline) for vLLM tests.",
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=None,
        help="output directory (default: $LLM_GUARD_CACHE_DIR/tiny-llama or "
        "~/.cache/llm-guard-sdk/tiny-llama)",
    )
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument(
        "--vocab-size", type=int, default=512, help="target BPE vocab size (default 512)"
    )
    parser.add_argument(
        "--max-position-embeddings", type=int, default=2048, help="max sequence length"
    )
    args = parser.parse_args(argv)
    path = build_tiny_model(
        args.directory if args.directory is not None else default_model_dir(),
        seed=args.seed,
        vocab_size_target=args.vocab_size,
        max_position_embeddings=args.max_position_embeddings,
    )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
