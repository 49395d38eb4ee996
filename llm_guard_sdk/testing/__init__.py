"""Test helpers: a tiny, locally built Llama model and a CPU vLLM engine factory.

Nothing here touches the network. The heavy dependencies (torch, transformers,
tokenizers, vllm) are imported lazily inside the functions that need them, so
importing this package is cheap.
"""
