"""The tiny model's tokenizer: byte-level BPE trained offline on a small built-in corpus.

Saved as a Hugging Face fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json`` with
bos/eos/unk/pad tokens and a ``chat_template``), so vLLM and ``transformers`` load it like any
hub tokenizer. ``tokenizers`` is imported inside the functions that need it.
"""

from __future__ import annotations

import itertools
import json
import pathlib
from collections.abc import Iterator
from typing import Any

BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
UNK_TOKEN = "<unk>"
PAD_TOKEN = "<pad>"
_SPECIAL_TOKENS = [UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN]

#: Minimal chat template: ``<|role|>\ncontent\n`` per message, then ``<|assistant|>\n``.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_PARAGRAPHS = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles "
    "begins with a single step. All that glitters is not gold.",
    "Streaming servers send tokens to clients as soon as they are generated. When a "
    "client disconnects, the server should stop the request, free its memory and "
    "release the key value cache blocks that the request was holding.",
    "Hello! How are you today? I am fine, thank you. What would you like to talk "
    "about? Let us talk about the weather, the sea, the mountains and the city.",
    "Once upon a time there was a small model that lived on a computer with two "
    "cores. It could not think very well, but it could count, and it could repeat "
    "what it heard, and that was enough for the tests.",
    "The user asked a question and the assistant gave an answer. Then the user asked "
    "another question, and the assistant answered again, one word at a time.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 512 1024 2048 4096. "
    "Punctuation: , . ; : ! ? ' \" ( ) [ ] { } - _ / \\ @ # $ % ^ & * + = < > ~ `.",
    "import json\nimport os\n\ndef main():\n    print('hello, world')\n    return 0\n",
)

_SUBJECTS = ("The server", "A client", "The model", "Every request", "The engine", "Our team")
_VERBS = ("reads", "writes", "streams", "cancels", "measures", "watches")
_OBJECTS = (
    "the memory usage",
    "a long answer",
    "the next token",
    "every session",
    "the cache blocks",
    "a short message",
)
_TAILS = ("quickly.", "again and again.", "before noon.", "without errors.")


def corpus() -> Iterator[str]:
    """Yield the deterministic training corpus (about 8 KB of English text)."""
    yield from _PARAGRAPHS
    for i, (subject, verb, obj) in enumerate(itertools.product(_SUBJECTS, _VERBS, _OBJECTS)):
        yield f"{subject} {verb} {obj} {_TAILS[i % len(_TAILS)]}"


def train_tokenizer(out_dir: pathlib.Path, vocab_size_target: int, max_len: int) -> int:
    """Train and save the tokenizer; return ``len(tokenizer)`` (including specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # Keep offsets sane; do not add BOS automatically (the chat template adds it).
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size_target,
        min_frequency=1,
        show_progress=False,
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(list(corpus()), trainer=trainer)
    tokenizer.save(str(out_dir / "tokenizer.json"))

    token_ids = {tok: tokenizer.token_to_id(tok) for tok in _SPECIAL_TOKENS}
    added_tokens_decoder = {
        str(token_ids[tok]): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for tok in _SPECIAL_TOKENS
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "unk_token": UNK_TOKEN,
        "pad_token": PAD_TOKEN,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "added_tokens_decoder": added_tokens_decoder,
        "chat_template": CHAT_TEMPLATE,
    }
    special_tokens_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "unk_token": UNK_TOKEN,
        "pad_token": PAD_TOKEN,
    }
    write_json(out_dir / "tokenizer_config.json", tokenizer_config)
    write_json(out_dir / "special_tokens_map.json", special_tokens_map)
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def special_ids(out_dir: pathlib.Path) -> dict[str, int]:
    """The ids of the bos, eos and pad tokens of the tokenizer saved in ``out_dir``."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    ids: dict[str, int] = {}
    for name, tok in (("bos", BOS_TOKEN), ("eos", EOS_TOKEN), ("pad", PAD_TOKEN)):
        token_id = tokenizer.token_to_id(tok)
        if token_id is None:  # pragma: no cover - the trainer always adds specials
            raise RuntimeError(f"special token {tok!r} missing from the trained tokenizer")
        ids[name] = int(token_id)
    return ids


def write_json(path: pathlib.Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as stable, readable JSON (sorted keys, indented)."""
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
