import asyncio, time, os, sys
sys.path.insert(0, os.getcwd())
from llm_guard_sdk.testing.tiny_model import build_tiny_model
from llm_guard_sdk.testing.engine import make_async_llm

async def run(eng, label, n, max_tokens, prompt_len=40):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    async def one(i):
        sp = SamplingParams(max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
        ts=[]; 
        async for out in eng.generate(TokensPrompt(prompt_token_ids=[(i*7+j) % 500 + 5 for j in range(prompt_len)]), sp, f"{label}{i}"):
            ts.append((time.perf_counter(), len(out.outputs[0].token_ids)))
        return ts
    t0=time.perf_counter()
    res = await asyncio.gather(*(one(i) for i in range(n)))
    dt=time.perf_counter()-t0
    tot=sum(sum(c for _,c in r) for r in res)
    # per-100-token timing of request 0
    r=res[0]; marks=[]; acc=0
    for t,c in r:
        acc+=c
        if acc % 50 == 0: marks.append((acc, round(t-t0,3)))
    print(f"{label}: n={n} max_tokens={max_tokens}: {tot} tokens in {dt:.2f}s = {tot/dt:.0f} tok/s; req0 marks {marks}", flush=True)

async def main():
    d = build_tiny_model("/tmp/tiny-llama")
    kw = dict(eval(sys.argv[1])) if len(sys.argv) > 1 else {}
    eng = make_async_llm(d, **kw)
    print("cfg", kw, "blocks", eng.vllm_config.cache_config.num_gpu_blocks, "bs", eng.vllm_config.cache_config.block_size, flush=True)
    await run(eng, "warm", 1, 16)
    await run(eng, "single", 1, 400)
    await run(eng, "eight", 8, 200)
    eng.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
