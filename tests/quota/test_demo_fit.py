"""The quota model fitted on a real run of the demo app (simulated backend, real uvicorn, HTTP).

Load levels with different request rates and prompt lengths are driven through ``GET /chat``
until the recorder has enough windows; the test asserts that a fit exists and reports its
quality. The simulated backend holds little per request, so the fit's quality is reported, not
asserted (and nothing here asserts a speed: the rates are targets, the recorder measures).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llm_guard_sdk.quota import MIN_OBSERVATIONS, QuotaDocument, fit
from tests.support import BASE_ENV, run_cli, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

WINDOW = 0.5
RATES = (2.0, 6.0, 12.0)  # requests per second to aim for
PROMPT_WORDS = (20, 300, 2000)  # context lengths (the app reports words as tokens)


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    env = {**BASE_ENV, "LLM_GUARD_DEMO_RATE": "0", "LLM_GUARD_TEST_QUOTA_WINDOW": str(WINDOW)}
    with uvicorn_server("tests.quota.apps.demo_app:app", env) as base:
        yield base


async def drive(client: httpx.AsyncClient, base: str, rate: float, words: int,
                seconds: float) -> list[int]:
    """Start ``rate`` chats per second for ``seconds``; the status codes once all finished."""
    prompt = " ".join(itertools.islice(itertools.cycle(("memory", "guard", "tokens")), words))
    count = max(1, round(rate * seconds))
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(
            client.get(f"{base}/chat", params={"prompt": prompt, "max_tokens": "8"})))
        await asyncio.sleep(seconds / count)
    return [response.status_code for response in await asyncio.gather(*tasks)]


async def test_the_model_fits_a_real_run_of_the_demo(demo: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        for rate, words in itertools.product(RATES, PROMPT_WORDS):
            codes = await drive(client, demo, rate, words, seconds=3 * WINDOW)
            assert set(codes) == {200}

        async def fitted() -> bool:
            body: dict[str, Any] = (await client.get(f"{demo}/llm-guard/quota")).json()
            return len(body["observations"]) >= MIN_OBSERVATIONS and body["fit"] is not None

        await wait_for(fitted, timeout=30)
        doc = (await client.get(f"{demo}/llm-guard/quota")).json()
        status = (await client.get(f"{demo}/llm-guard/status")).json()["quota"]

    document = QuotaDocument.from_dict(doc)
    model = fit(document.observations)  # the route's fit is the same refit
    assert doc["fit"]["n"] == model.n == len(document.observations)
    assert status["fit"] is not None and status["observations"] >= MIN_OBSERVATIONS
    assert len({round(o.context_tokens) for o in document.observations}) >= 3
    assert document.limit_bytes and document.mean_session_seconds
    plan = run_cli("plan", "--url", demo, "--qps", "10", "--context", "500")
    assert plan.returncode == 0, plan.stderr
    with capsys.disabled():
        print(f"\nquota fit on the demo app ({model.n} windows of {WINDOW} s): "
              f"alpha={model.alpha:.4g} B/(req/s*token) beta={model.beta:.4g} B/sqrt(token) "
              f"gamma={model.gamma / 2**20:.1f} MiB R^2={model.r_squared:.3f} "
              f"residual std error={model.residual_std_error / 2**20:.2f} MiB")
        print(plan.stdout)
