"""The opt-in stream of full outputs, and checking ``generate()`` keywords against vLLM's.

Text deltas are enough for a chat UI; production code also needs why a completion ended,
its token ids and usage counts, for every one of ``n`` completions. :func:`output_chunk` turns
each (delta-mode) ``RequestOutput`` into an :class:`OutputChunk` whose counts are cumulative.

``AsyncLLM.generate`` takes more than a prompt (``lora_request``, ``priority``,
``trace_headers``, ...) and its keywords change between vLLM versions, so they are checked
against the installed engine's own signature (:func:`check_generate_kwargs`): a name it does
not take is a clear ``TypeError`` when the stream is created, not a failure inside the engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CompletionDelta", "OutputChunk", "UsageCounter", "check_generate_kwargs"]

_SET_BY_US = frozenset({"prompt", "sampling_params", "request_id"})


@dataclass(frozen=True, slots=True)
class CompletionDelta:
    """What one of the ``n`` completions added in this step.

    Attributes:
        index: Which completion (0 to n-1).
        text: The new text.
        token_ids: The new token ids.
        finish_reason: ``"stop"``, ``"length"``, ``"abort"``, ... once it ended, else None.
        stop_reason: The stop string or token id that ended it, if any.
        completion_tokens: Tokens this completion generated so far.
    """

    index: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    stop_reason: int | str | None
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One step of a request: the completions that moved, and usage so far.

    Attributes:
        request_id: The engine's request id.
        outputs: A delta per completion that moved in this step.
        finished: True on the last chunk (every completion ended).
        prompt_tokens: Tokens of the prompt.
        completion_tokens: Tokens generated so far, over all completions.
    """

    request_id: str
    outputs: tuple[CompletionDelta, ...]
    finished: bool
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens (OpenAI's ``usage.total_tokens``)."""
        return self.prompt_tokens + self.completion_tokens


class UsageCounter:
    """Cumulative token counts of one request, per completion, fed by each delta output.

    :meth:`count` is the per-step hot path (the KV bytes of the text stream need it);
    :meth:`chunk` builds the full description only for :meth:`VLLMStreams.stream_outputs`.
    """

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.prompt_tokens = 0
        self.per_completion: dict[int, int] = {}

    @property
    def total_tokens(self) -> int:
        """Prompt plus every completion's tokens so far."""
        return self.prompt_tokens + sum(self.per_completion.values())

    def count(self, out: Any) -> int:
        """Count ``out`` (a delta-mode ``RequestOutput``); return :attr:`total_tokens`."""
        if not self.prompt_tokens:
            self.prompt_tokens = len(out.prompt_token_ids or ())
        for completion in out.outputs:
            index = int(getattr(completion, "index", 0))
            self.per_completion[index] = (self.per_completion.get(index, 0)
                                          + len(completion.token_ids or ()))
        return self.total_tokens

    def chunk(self, out: Any) -> OutputChunk:
        """Describe ``out``, already counted."""
        deltas = tuple(
            CompletionDelta(int(getattr(c, "index", 0)), c.text or "", tuple(c.token_ids or ()),
                            c.finish_reason, getattr(c, "stop_reason", None),
                            self.per_completion.get(int(getattr(c, "index", 0)), 0))
            for c in out.outputs)
        return OutputChunk(self.request_id, deltas, bool(out.finished), self.prompt_tokens,
                           sum(self.per_completion.values()))


def check_generate_kwargs(engine: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` if the engine's ``generate()`` takes each of them; else a clear TypeError."""
    if not kwargs:
        return {}
    try:
        parameters = inspect.signature(engine.generate).parameters
    except (TypeError, ValueError):  # no introspectable signature: let the engine decide
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(kwargs)
    accepted = {name for name, p in parameters.items()
                if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                              inspect.Parameter.POSITIONAL_OR_KEYWORD)} - _SET_BY_US
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(f"the installed vLLM's generate() does not take {', '.join(unknown)}; "
                        f"it takes {', '.join(sorted(accepted))}")
    return dict(kwargs)
