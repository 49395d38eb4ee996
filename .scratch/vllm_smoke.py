"""Scratch: prove the vLLM CPU AsyncLLM APIs the SDK relies on (not shipped)."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import warnings

sys.path.insert(0, os.getcwd())

WARNINGS: list[warnings.WarningMessage] = []
_wcm = warnings.catch_warnings(record=True)
_wlist = _wcm.__enter__()
warnings.simplefilter("always")

from llm_guard_sdk.testing.engine import make_async_llm  # noqa: E402
from llm_guard_sdk.testing.tiny_model import build_tiny_model  # noqa: E402

SECTION_T0 = time.perf_counter()


def hdr(name: str) -> None:
    print(f"\n===== {name} =====", flush=True)


def now() -> float:
    return time.perf_counter()


STATS: list[tuple[float, float, int, int]] = []  # (t, kv_usage, running, waiting)
RECORD_CALLS = {"n": 0, "with_sched": 0, "with_iter": 0}


def make_stat_logger_cls():  # type: ignore[no-untyped-def]
    from vllm.v1.metrics.loggers import StatLoggerBase

    class KVStats(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):  # type: ignore[no-untyped-def]
            self.vllm_config = vllm_config
            self.engine_index = engine_index
            print(f"[KVStats] __init__(vllm_config={type(vllm_config).__name__}, "
                  f"engine_index={engine_index!r})", flush=True)

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None,  # type: ignore[no-untyped-def]
                   engine_idx=0):
            RECORD_CALLS["n"] += 1
            if iteration_stats is not None:
                RECORD_CALLS["with_iter"] += 1
            if scheduler_stats is not None:
                RECORD_CALLS["with_sched"] += 1
                STATS.append((now(), scheduler_stats.kv_cache_usage,
                              scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs))

        def log_engine_initialized(self):  # type: ignore[no-untyped-def]
            print("[KVStats] log_engine_initialized()", flush=True)

    return KVStats


async def drain_unfinished(engine, timeout: float = 5.0) -> float:  # type: ignore[no-untyped-def]
    t0 = now()
    while engine.get_num_unfinished_requests() != 0:
        if now() - t0 > timeout:
            return float("inf")
        await asyncio.sleep(0.001)
    return now() - t0


async def main() -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    hdr("build model")
    t = now()
    model_dir = build_tiny_model("/tmp/tiny-llama")
    print(f"build_tiny_model -> {model_dir} in {now() - t:.3f}s")

    hdr("engine start")
    KVStats = make_stat_logger_cls()
    t = now()
    engine = make_async_llm(model_dir, stat_loggers=[KVStats])
    print(f"ENGINE START: {now() - t:.2f}s  type={type(engine).__module__}.{type(engine).__name__}")

    # (j) model/cache config
    hdr("(j) model config / cache config")
    mc = engine.model_config
    pc = engine.vllm_config.parallel_config
    cc = engine.vllm_config.cache_config
    print("num_layers", mc.get_num_layers(pc), "num_kv_heads", mc.get_num_kv_heads(pc),
          "head_size", mc.get_head_size(), "dtype", mc.dtype, "max_model_len", mc.max_model_len,
          "vocab", mc.get_vocab_size())
    print("cache_config.block_size", cc.block_size, "num_gpu_blocks", cc.num_gpu_blocks,
          "num_cpu_blocks", cc.num_cpu_blocks, "cache_dtype", cc.cache_dtype,
          "kv_cache_memory_bytes", cc.kv_cache_memory_bytes,
          "enable_prefix_caching", cc.enable_prefix_caching)
    print("scheduler max_num_seqs", engine.vllm_config.scheduler_config.max_num_seqs,
          "max_num_batched_tokens", engine.vllm_config.scheduler_config.max_num_batched_tokens)

    # (l) tokenizer
    hdr("(l) tokenizer / chat template")
    print("get_tokenizer is coroutine fn:", asyncio.iscoroutinefunction(engine.get_tokenizer))
    tok = engine.get_tokenizer()
    print("tokenizer type", type(tok).__module__, type(tok).__name__, "len", len(tok),
          "eos", tok.eos_token_id, "bos", tok.bos_token_id)
    msgs = [{"role": "user", "content": "Hello, how are you?"}]
    chat_text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    print("chat text:", repr(chat_text))
    chat_ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    print("chat ids type", type(chat_ids).__name__, chat_ids if isinstance(chat_ids, list) else dict(chat_ids))
    if not isinstance(chat_ids, list):
        chat_ids = list(chat_ids["input_ids"])
    enc = tok.encode("Hello there")
    print("encode('Hello there') ->", enc, "(no BOS added)" if enc and enc[0] != tok.bos_token_id else "")

    # (a) streaming DELTA
    hdr("(a) streaming DELTA")
    sp = SamplingParams(max_tokens=64, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
    t0 = now()
    first = None
    n_tok = 0
    n_out = 0
    async for out in engine.generate("The server streams", sp, "req-a"):
        if first is None:
            first = now() - t0
        o = out.outputs[0]
        n_tok += len(o.token_ids)
        if n_out < 5 or out.finished:
            print(f"  out#{n_out}: request_id={out.request_id!r} text={o.text!r} token_ids={list(o.token_ids)} "
                  f"prompt_token_ids(len)={len(out.prompt_token_ids or [])} finished={out.finished} "
                  f"finish_reason={o.finish_reason} num_cached_tokens={out.num_cached_tokens}")
        n_out += 1
    dt = now() - t0
    print(f"  {n_out} outputs, {n_tok} tokens, TTFT {first*1000:.1f} ms, total {dt*1000:.1f} ms, "
          f"{n_tok/dt:.0f} tok/s (single stream)")
    print("  unfinished after:", engine.get_num_unfinished_requests())

    # (n) CUMULATIVE vs DELTA semantics
    hdr("(n) CUMULATIVE vs FINAL_ONLY")
    spc = SamplingParams(max_tokens=8, output_kind=RequestOutputKind.CUMULATIVE, ignore_eos=True)
    lens = []
    async for out in engine.generate("The server streams", spc, "req-n"):
        lens.append(len(out.outputs[0].token_ids))
    print("  CUMULATIVE token_ids lengths per output:", lens)
    spf = SamplingParams(max_tokens=8, output_kind=RequestOutputKind.FINAL_ONLY, ignore_eos=True)
    lens = []
    async for out in engine.generate("The server streams", spf, "req-n2"):
        lens.append(len(out.outputs[0].token_ids))
    print("  FINAL_ONLY token_ids lengths per output:", lens)
    print("  default SamplingParams().output_kind =", SamplingParams().output_kind)

    # concurrent throughput
    hdr("(a2) 8 concurrent streams x 64 tokens")

    async def consume(rid: str, max_tokens: int = 64) -> int:
        p = SamplingParams(max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
        n = 0
        async for out in engine.generate(TokensPrompt(prompt_token_ids=enc), p, rid):
            n += len(out.outputs[0].token_ids)
        return n

    t0 = now()
    counts = await asyncio.gather(*(consume(f"c{i}") for i in range(8)))
    dt = now() - t0
    print(f"  total tokens {sum(counts)} in {dt:.3f}s -> {sum(counts)/dt:.0f} tok/s aggregate")
    t0 = now()
    counts = await asyncio.gather(*(consume(f"d{i}", 128) for i in range(32)))
    dt = now() - t0
    print(f"  32 streams x 128: total tokens {sum(counts)} in {dt:.3f}s -> {sum(counts)/dt:.0f} tok/s")

    # (e) stats observed so far
    hdr("(e) StatLogger records")
    print("  record calls:", RECORD_CALLS)
    if STATS:
        mx = max(STATS, key=lambda s: s[1])
        print(f"  samples={len(STATS)} max kv_cache_usage={mx[1]:.4f} (running={mx[2]}, waiting={mx[3]})")
        print("  last 3:", STATS[-3:])

    # (b) aclose mid-stream
    hdr("(b) aclose() mid-stream")
    sp_long = SamplingParams(max_tokens=400, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
    gen = engine.generate("Hello", sp_long, "req-b")
    for _ in range(5):
        await gen.__anext__()
    print("  unfinished before:", engine.get_num_unfinished_requests())
    t0 = now()
    await gen.aclose()
    t_close = now() - t0
    print(f"  aclose() took {t_close*1000:.2f} ms; unfinished right after: "
          f"{engine.get_num_unfinished_requests()}")
    print(f"  drain wait: {(await drain_unfinished(engine))*1000:.2f} ms")
    await asyncio.sleep(0.2)
    print("  STATS after (running, waiting):", STATS[-1][2:] if STATS else None)

    # (c) engine.abort(request_id) mid-stream
    hdr("(c) engine.abort(request_id) mid-stream")
    gen = engine.generate("Hello", sp_long, "req-c")
    for _ in range(5):
        await gen.__anext__()
    print("  abort is coroutine fn:", asyncio.iscoroutinefunction(engine.abort))
    t0 = now()
    await engine.abort("req-c")
    t_abort = now() - t0
    print(f"  await engine.abort('req-c') took {t_abort*1000:.2f} ms; unfinished right after: "
          f"{engine.get_num_unfinished_requests()}")
    try:
        n_after = 0
        async for out in gen:
            n_after += 1
            o = out.outputs[0]
            print(f"  yielded after abort: finished={out.finished} finish_reason={o.finish_reason!r} "
                  f"stop_reason={o.stop_reason!r} tokens={len(o.token_ids)} text={o.text!r}")
        print(f"  generator ended normally after {n_after} outputs")
    except BaseException as e:  # noqa: BLE001
        print(f"  generator raised {type(e).__module__}.{type(e).__name__}: {e}")
    print(f"  drain: {(await drain_unfinished(engine))*1000:.2f} ms")

    # (c2) abort of unknown id
    t0 = now()
    await engine.abort("no-such-request")
    print(f"  abort(unknown id) -> no error, {(now()-t0)*1000:.2f} ms")

    # (d) cancel consuming task
    hdr("(d) cancel consuming task")
    got = asyncio.Event()

    async def consumer() -> None:
        async for _ in engine.generate("Hello", sp_long, "req-d"):
            got.set()

    task = asyncio.create_task(consumer())
    await got.wait()
    await asyncio.sleep(0.02)
    print("  unfinished before cancel:", engine.get_num_unfinished_requests())
    t0 = now()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print(f"  task raised CancelledError after {(now()-t0)*1000:.2f} ms")
    print(f"  unfinished right after: {engine.get_num_unfinished_requests()}; "
          f"drain {(await drain_unfinished(engine))*1000:.2f} ms")

    # (b2) generator dropped without aclose (GC)
    hdr("(b2) generator abandoned + gc")
    gen = engine.generate("Hello", sp_long, "req-b2")
    await gen.__anext__()
    del gen
    gc.collect()
    await asyncio.sleep(0)
    d = await drain_unfinished(engine, 2.0)
    print(f"  unfinished after del+gc: drain {d*1000:.2f} ms  "
          f"(now {engine.get_num_unfinished_requests()})")

    # (g) prompt longer than max_model_len
    hdr("(g) prompt longer than max_model_len")
    long_ids = (enc * 400)[:600]
    gen = engine.generate(TokensPrompt(prompt_token_ids=long_ids), sp, "req-g")
    print("  generate() call returned", type(gen).__name__, "(no exception yet)")
    try:
        await gen.__anext__()
        print("  no error?!")
    except BaseException as e:  # noqa: BLE001
        print(f"  first __anext__ raised {type(e).__module__}.{type(e).__name__}: {e}")
        print("  MRO:", [c.__name__ for c in type(e).__mro__])
    print("  unfinished:", engine.get_num_unfinished_requests())
    # prompt == max_model_len exactly, and prompt+max_tokens > max_model_len
    for n_prompt in (512, 500):
        gen = engine.generate(TokensPrompt(prompt_token_ids=(enc * 400)[:n_prompt]),
                              SamplingParams(max_tokens=64, output_kind=RequestOutputKind.DELTA,
                                             ignore_eos=True), f"req-g{n_prompt}")
        try:
            n = 0
            fr = None
            async for out in gen:
                n += len(out.outputs[0].token_ids)
                fr = out.outputs[0].finish_reason
            print(f"  prompt {n_prompt} + max_tokens 64: ok, generated {n}, finish_reason={fr}")
        except BaseException as e:  # noqa: BLE001
            print(f"  prompt {n_prompt} + max_tokens 64: {type(e).__name__}: {e}")
    # text prompt too long
    gen = engine.generate("word " * 1000, sp, "req-g-text")
    try:
        await gen.__anext__()
    except BaseException as e:  # noqa: BLE001
        print(f"  text prompt too long: {type(e).__module__}.{type(e).__name__}: {str(e)[:200]}")

    # (h) duplicate request id
    hdr("(h) duplicate request id (concurrent)")

    async def collect(rid: str) -> tuple[str, int, str | None]:
        n = 0
        fr = None
        internal = None
        async for out in engine.generate("Hello", SamplingParams(max_tokens=32, output_kind=RequestOutputKind.DELTA, ignore_eos=True), rid):
            n += len(out.outputs[0].token_ids)
            fr = out.outputs[0].finish_reason
            internal = out.request_id
        return (internal or "", n, fr)

    try:
        res = await asyncio.gather(collect("dup"), collect("dup"), return_exceptions=True)
        print("  results:", res)
    except BaseException as e:  # noqa: BLE001
        print(f"  raised {type(e).__name__}: {e}")
    # abort on duplicated external id aborts both?
    g1 = engine.generate("Hello", sp_long, "dup2")
    g2 = engine.generate("Hello", sp_long, "dup2")
    await g1.__anext__()
    await g2.__anext__()
    print("  two 'dup2' running; unfinished =", engine.get_num_unfinished_requests())
    await engine.abort("dup2")
    fin = []
    for g in (g1, g2):
        last = None
        async for out in g:
            last = out
        fin.append(None if last is None else (last.finished, last.outputs[0].finish_reason))
    print("  after abort('dup2'): last outputs", fin, "unfinished", engine.get_num_unfinished_requests())

    # (i) token-id prompts
    hdr("(i) token-id prompts")
    for label, prompt in (
        ("TokensPrompt", TokensPrompt(prompt_token_ids=chat_ids)),
        ("plain dict", {"prompt_token_ids": chat_ids}),
        ("TextPrompt dict", {"prompt": chat_text}),
    ):
        outs = [o async for o in engine.generate(prompt, SamplingParams(max_tokens=4, output_kind=RequestOutputKind.DELTA, ignore_eos=True), f"req-i-{label}")]
        print(f"  {label}: prompt_token_ids len={len(outs[-1].prompt_token_ids)} "
              f"(first ids {outs[-1].prompt_token_ids[:4]}) prompt={outs[-1].prompt!r:.60}")
    # renderer path (non-deprecated)
    try:
        from vllm.renderers.inputs.preprocess import parse_model_prompt

        r = engine.renderer
        (ei,) = await r.render_cmpl_async([parse_model_prompt(engine.model_config, {"prompt_token_ids": chat_ids})])
        print("  renderer.render_cmpl_async -> keys", sorted(ei.keys()), "type", ei.get("type"))
        outs = [o async for o in engine.generate(ei, SamplingParams(max_tokens=4, output_kind=RequestOutputKind.DELTA, ignore_eos=True), "req-i-render")]
        print("  generate(EngineInput) ok, prompt len", len(outs[-1].prompt_token_ids))
        (ei2,) = await r.render_cmpl_async([parse_model_prompt(engine.model_config, "Hello there")])
        print("  render text prompt -> prompt_token_ids", ei2.get("prompt_token_ids"))
    except BaseException as e:  # noqa: BLE001
        print(f"  renderer path failed: {type(e).__name__}: {e}")

    # (k) EngineDeadError
    hdr("(k) exceptions")
    print("  EngineDeadError:", EngineDeadError.__module__, [c.__name__ for c in EngineDeadError.__mro__])
    print("  EngineGenerateError:", EngineGenerateError.__module__, [c.__name__ for c in EngineGenerateError.__mro__])
    print("  engine.errored", engine.errored, "is_running", engine.is_running, "is_stopped", engine.is_stopped)
    t0 = now()
    await engine.check_health()
    print(f"  check_health ok in {(now()-t0)*1000:.2f} ms")

    # (m) shutdown
    hdr("(m) shutdown")
    t0 = now()
    engine.shutdown()
    print(f"  engine.shutdown() took {now()-t0:.2f}s; errored={engine.errored}")
    try:
        await engine.generate("x", sp, "after-shutdown").__anext__()
    except BaseException as e:  # noqa: BLE001
        print(f"  generate after shutdown: {type(e).__module__}.{type(e).__name__}: {e}")
    del engine
    gc.collect()

    # (f) tiny KV cache, second engine in the same process
    hdr("(f) tiny KV cache (second engine in same process)")
    STATS.clear()
    t = now()
    small = make_async_llm(model_dir, kv_cache_memory_bytes=4 * 256 * 2**10, max_model_len=256,
                           max_num_seqs=16, stat_loggers=[KVStats])
    print(f"  second engine start {now()-t:.2f}s; block_size={small.vllm_config.cache_config.block_size} "
          f"num_gpu_blocks={small.vllm_config.cache_config.num_gpu_blocks}")

    async def long_req(i: int) -> tuple[int, str | None]:
        p = SamplingParams(max_tokens=200, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
        n = 0
        fr = None
        async for out in small.generate(TokensPrompt(prompt_token_ids=(enc * 100)[:40]), p, f"long{i}"):
            n += len(out.outputs[0].token_ids)
            fr = out.outputs[0].finish_reason
        return n, fr

    t0 = now()
    res = await asyncio.gather(*(long_req(i) for i in range(8)))
    print(f"  8 x (40 prompt + 200 gen) done in {now()-t0:.2f}s: {res}")
    mx_usage = max(s[1] for s in STATS) if STATS else None
    mx_wait = max(s[3] for s in STATS) if STATS else None
    print(f"  samples={len(STATS)} max kv_cache_usage={mx_usage} max waiting={mx_wait} "
          f"max running={max(s[2] for s in STATS) if STATS else None}")
    step = max(1, len(STATS) // 15)
    for s in STATS[::step]:
        print(f"    t={s[0]-t0:6.3f} kv={s[1]:.3f} running={s[2]} waiting={s[3]}")

    # (k2) engine death: kill the EngineCore process mid-stream
    hdr("(k2) kill EngineCore mid-stream")
    import psutil

    kids = psutil.Process().children(recursive=True)
    print("  child processes:", [(k.pid, k.name()) for k in kids])
    gen = small.generate("Hello", SamplingParams(max_tokens=200, output_kind=RequestOutputKind.DELTA, ignore_eos=True), "req-k")
    await gen.__anext__()
    t0 = now()
    for k in kids:
        if "python" in k.name().lower() or "VLLM" in k.name() or "Engine" in k.name():
            k.kill()
    try:
        async for _ in gen:
            pass
        print("  generator ended normally?")
    except BaseException as e:  # noqa: BLE001
        print(f"  after kill, generator raised {type(e).__module__}.{type(e).__name__}: {e!r} "
              f"after {(now()-t0)*1000:.0f} ms")
    print("  errored", small.errored, "dead_error", type(small.dead_error).__name__)
    try:
        await small.generate("x", sp, "after-death").__anext__()
    except BaseException as e:  # noqa: BLE001
        print(f"  new generate after death: {type(e).__name__}: {e}")
    t0 = now()
    small.shutdown()
    print(f"  shutdown after death took {now()-t0:.2f}s")
    del small
    gc.collect()


if __name__ == "__main__":
    T = now()
    asyncio.run(main())
    gc.collect()
    print(f"\nTOTAL {now()-T:.1f}s")
    hdr("warnings.warn() calls seen in main process")
    seen = set()
    for w in _wlist:
        key = (w.category.__name__, str(w.message)[:110], os.path.relpath(w.filename, os.getcwd()), w.lineno)
        if key in seen:
            continue
        seen.add(key)
        print("  ", key)
