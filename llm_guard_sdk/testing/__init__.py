"""Test and demo helpers that need no network.

A tiny, locally built Llama model (:mod:`.tiny_model`, :mod:`.tiny_tokenizer`), a CPU vLLM
engine factory (:mod:`.engine`), the demo's model backends (:mod:`.backends`) and a
deterministic simulated LLM (:mod:`.simulator`). The heavy dependencies (torch, transformers,
tokenizers, vllm) are imported lazily inside the functions that need them, so importing this
package is cheap.
"""
