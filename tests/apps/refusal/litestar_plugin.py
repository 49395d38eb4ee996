"""``Litestar(plugins=[LLMGuardPlugin()])``: the Litestar adapter."""

from litestar import Litestar, get

from llm_guard_sdk.adapters.litestar import LLMGuardPlugin


@get("/hello")
async def hello() -> dict[str, str]:
    return {"hello": "world"}


app = Litestar([hello], plugins=[LLMGuardPlugin()])
