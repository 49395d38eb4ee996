"""``install(app)``: the FastAPI adapter."""

from fastapi import FastAPI

from llm_guard_sdk.adapters.fastapi import install

app = FastAPI()
install(app)
