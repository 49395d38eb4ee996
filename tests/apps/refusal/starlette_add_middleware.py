"""``app.add_middleware(GuardMiddleware)``: Starlette builds it lazily, at the lifespan."""

from fastapi import FastAPI

from llm_guard_sdk import GuardMiddleware

app = FastAPI()
app.add_middleware(GuardMiddleware)


@app.get("/hello")
async def hello() -> dict[str, str]:
    return {"hello": "world"}
