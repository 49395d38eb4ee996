import asyncio, time, os, sys
sys.path.insert(0, os.getcwd())
from llm_guard_sdk.testing.tiny_model import build_tiny_model
from llm_guard_sdk.testing.engine import make_async_llm

async def main():
    d = build_tiny_model("/tmp/tiny-llama")
    t = time.perf_counter()
    eng = make_async_llm(d)
    print("START", time.perf_counter() - t, flush=True)
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    sp = SamplingParams(max_tokens=64, output_kind=RequestOutputKind.DELTA, ignore_eos=True)
    t = time.perf_counter(); n=0
    async for out in eng.generate("Hello there, how are", sp, "r1"):
        n += len(out.outputs[0].token_ids)
    print("GEN", n, time.perf_counter() - t, flush=True)
    eng.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
