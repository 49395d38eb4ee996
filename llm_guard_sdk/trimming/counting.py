r"""Token counts of messages: exact with the engine's tokenizer, a safe upper bound without.

**With a tokenizer** (anything with ``encode(text)`` returning token ids or an encoding with
``.ids`` — vLLM's ``engine.get_tokenizer()``, a Hugging Face tokenizer, a ``tokenizers``
``Tokenizer`` — or a callable ``text -> ids``) a message costs ``len(encode(content))`` plus a
per-message overhead. Hugging Face tokenizers add their special tokens (e.g. BOS) to every
``encode``; that over-counts by one per message, which errs on the safe side.

**Without one** the estimate is one token per UTF-8 byte (``bytes_per_token=1``). That is an
upper bound, not an average: in a byte-level BPE (GPT-2, Llama 3, Qwen, the tiny test model)
and in a SentencePiece model with byte fallback (Llama 2, Mistral) every token covers at least
one byte of the text, so a text never has more tokens than bytes. Cheaper-looking rules
(bytes / 3, bytes / 4) are averages for large English vocabularies and under-count small
vocabularies and other scripts: the tiny model's tokenizer (512 entries) needs 27 tokens for
the 52-byte "Tell me about the weather in Paris tomorrow, please." (bytes / 3 says 18) and 43
for a 46-byte accented and Japanese line. On ordinary English the bound over-estimates by 2-5x
(4.7 bytes per token on the tiny model's own corpus), so a budget fills early but never
overflows; pass the engine's tokenizer for exact counts, or ``bytes_per_token`` > 1 to trade
that guarantee for room.

**Chat-template overhead.** A template wraps each message in role markers and primes the
reply: the tiny model's ``<|role|>\n...\n`` costs at most 11 tokens per message, and BOS plus
``<|assistant|>\n`` 9 per conversation; ChatML and Llama 3 spend 4-5 per message. The defaults
(:data:`MESSAGE_OVERHEAD`, :data:`REPLY_OVERHEAD`) cover all of these; a test checks them
against the tiny model's real chat template.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from llm_guard_sdk.trimming.messages import Message

MESSAGE_OVERHEAD: Final = 12
"""Tokens a chat template adds around each message (role markers, separators)."""

REPLY_OVERHEAD: Final = 12
"""Tokens added once per conversation (BOS, the generation prompt ``<|assistant|>``)."""

@runtime_checkable
class Tokenizer(Protocol):
    """Anything with ``encode(text)``: vLLM's and Hugging Face tokenizers, ``tokenizers``."""

    def encode(self, text: str) -> Any:
        """Token ids of ``text`` (a sequence of ints, or an encoding with ``.ids``)."""
        ...


TokenizerLike = Tokenizer | Callable[[str], Any]
"""A :class:`Tokenizer` or a callable ``text -> token ids``."""


def _ids_length(encoded: object) -> int:
    ids = getattr(encoded, "ids", encoded)  # tokenizers.Encoding keeps its ids in .ids
    if isinstance(ids, int) and not isinstance(ids, bool):
        return ids
    if isinstance(ids, Sequence) and not isinstance(ids, str | bytes):
        return len(ids)
    raise TypeError(f"the tokenizer returned {type(encoded).__name__}; expected token ids")


class TokenCounter:
    """Counts the tokens a history costs; the one place trimming measures anything.

    Args:
        tokenizer: Exact counts with it (see the module docstring); None for the estimate.
        message_overhead: Tokens the chat template adds per message.
        reply_overhead: Tokens added once (BOS and the generation prompt).
        bytes_per_token: The estimate's UTF-8 bytes per token; 1 is a guaranteed upper bound.
    """

    def __init__(self, tokenizer: TokenizerLike | None = None, *,
                 message_overhead: int = MESSAGE_OVERHEAD, reply_overhead: int = REPLY_OVERHEAD,
                 bytes_per_token: float = 1.0) -> None:
        if message_overhead < 0 or reply_overhead < 0:
            raise ValueError("overheads must be >= 0")
        if not bytes_per_token >= 1.0 or not math.isfinite(bytes_per_token):
            raise ValueError("bytes_per_token must be a finite number >= 1")
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer) and not callable(
                tokenizer):
            raise TypeError("tokenizer must have encode(text) or be a callable text -> ids")
        self.tokenizer = tokenizer
        self.message_overhead = message_overhead
        self.reply_overhead = reply_overhead
        self.bytes_per_token = bytes_per_token

    @property
    def exact(self) -> bool:
        """True when counts come from a tokenizer, False for the byte estimate."""
        return self.tokenizer is not None

    def text_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone."""
        if self.tokenizer is None:
            return math.ceil(len(text.encode("utf-8", "surrogatepass")) / self.bytes_per_token)
        encode = (self.tokenizer.encode if isinstance(self.tokenizer, Tokenizer)
                  else self.tokenizer)
        return _ids_length(encode(text))

    def message(self, message: Message) -> int:
        """Tokens of one message: its content plus the template's per-message overhead."""
        return self.text_tokens(message["content"]) + self.message_overhead

    def total(self, messages: Sequence[Message]) -> int:
        """Tokens of a whole prompt built from ``messages`` (0 for no messages)."""
        if not messages:
            return 0
        return self.reply_overhead + sum(self.message(m) for m in messages)


def as_counter(tokenizer: TokenizerLike | TokenCounter | None) -> TokenCounter:
    """A :class:`TokenCounter` for what the caller gave (a counter is used as it is)."""
    return tokenizer if isinstance(tokenizer, TokenCounter) else TokenCounter(tokenizer)


class RememberingCounter(TokenCounter):
    """A counter that counts each message object once while it stays in one history.

    A chat recounts its whole history before every generation; tokenizing it again each turn
    would cost O(history) per turn. Costs are kept by the message object's identity and
    :meth:`keep_only` forgets every message no longer in the history, so no dropped text is
    kept alive by the cache (and an id is never reused while its message is alive).
    """

    def __init__(self, base: TokenCounter) -> None:
        super().__init__(base.tokenizer, message_overhead=base.message_overhead,
                         reply_overhead=base.reply_overhead,
                         bytes_per_token=base.bytes_per_token)
        self._costs: dict[int, int] = {}

    def message(self, message: Message) -> int:
        """:meth:`TokenCounter.message`, remembered for this object."""
        cost = self._costs.get(id(message))
        if cost is None:
            cost = self._costs[id(message)] = super().message(message)
        return cost

    def keep_only(self, messages: Sequence[Message]) -> None:
        """Forget the costs of every message not in ``messages``."""
        live = {id(m) for m in messages}
        self._costs = {key: cost for key, cost in self._costs.items() if key in live}
