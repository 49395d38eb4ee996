"""Turning a caller's arguments into what ``AsyncLLM.generate`` takes, or a clear 400.

Everything here validates before the request reaches the engine, so a bad argument is an
:class:`~llm_guard_sdk.errors.InvalidRequestError` the client can read, never an engine error.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from llm_guard_sdk.errors import InvalidRequestError

from .deps import require_vllm, safe_message

__all__ = ["check_request_id", "delta_params", "engine_prompt", "new_request_id",
           "safe_message"]


def new_request_id() -> str:
    """A random ``llmg-<96 bits>`` id, unique per stream."""
    return "llmg-" + secrets.token_hex(12)


def check_request_id(request_id: object) -> str:
    """A caller-chosen id: 1-128 printable ASCII characters."""
    if (isinstance(request_id, str) and 0 < len(request_id) <= 128
            and all("!" <= c <= "~" for c in request_id)):
        return request_id
    raise InvalidRequestError("request_id must be 1-128 printable ASCII characters")


def engine_prompt(engine: Any, prompt: str | Sequence[int] | None,
                  messages: Sequence[Mapping[str, str]] | None) -> dict[str, Any]:
    """The engine's prompt dict: text, token ids, or chat ``messages`` through its template."""
    if messages is not None:
        if prompt is not None:
            raise InvalidRequestError("pass either prompt or messages, not both")
        try:
            tokenizer = engine.get_tokenizer()
            text = tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                 add_generation_prompt=True)
        except Exception as exc:
            raise InvalidRequestError(f"cannot apply the chat template: {exc}") from None
        return {"prompt": str(text)}
    if isinstance(prompt, str):
        return {"prompt": prompt}
    if prompt is not None and all(isinstance(t, int) and t >= 0 for t in prompt):
        return {"prompt_token_ids": list(prompt)}
    raise InvalidRequestError("prompt must be text or a sequence of token ids")


def delta_params(sampling_params: Any) -> Any:
    """A copy of ``sampling_params`` (or the defaults) that streams deltas, not full text."""
    vllm = require_vllm()
    from vllm.sampling_params import RequestOutputKind

    if sampling_params is None:
        params = vllm.SamplingParams()
    elif isinstance(sampling_params, vllm.SamplingParams):
        params = sampling_params.clone()
    else:
        raise InvalidRequestError("sampling_params must be a vllm.SamplingParams")
    params.output_kind = RequestOutputKind.DELTA
    return params

