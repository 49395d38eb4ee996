"""The pytest plugin catches real leak patterns, with the chain that holds them.

Each test writes an inner test module with one pattern and runs it with ``--llm-guard-leaks``.
The leaking modules drive a real ``GuardMiddleware`` app or a ``Guard`` directly, under
pytest-asyncio and under anyio.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

APP = '''
import asyncio
import pytest
from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware, current_session

class Context:
    def __init__(self, prompt):
        self.prompt = prompt
        self.history = [prompt * 5000]

def make_guard():
    return Guard(GuardConfig.defaults(sources=("process",)))

async def call(app, path="/"):
    """One HTTP request through the ASGI app; the client disconnects after the response."""
    sent = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]
    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(0)
        return {"type": "http.disconnect"}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
             "headers": [], "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
             "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}
    await app(scope, receive, send)
    return sent

async def ok(send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
'''


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    """Run the inner session in a fresh interpreter.

    In process, the inner session would share the outer one's heap and event-loop leftovers
    (e.g. a vLLM engine's tasks from an earlier test module), which changes which root the
    reference-chain search reaches first; a subprocess makes each pattern's report exact.
    """
    pytester.makepyfile(test_leaky=APP + source)
    return pytester.runpytest_subprocess("--llm-guard-leaks", *args)


@pytest.mark.parametrize("marker", ["asyncio", "anyio"])
def test_closure_in_module_callback_list(inner: pytest.Pytester, marker: str) -> None:
    result = run(inner, f'''
CALLBACKS = []

async def handler(scope, receive, send):
    ctx = current_session().attach(Context("closure secret"))
    def on_done():
        return ctx.prompt
    CALLBACKS.append(on_done)
    await ok(send)

@pytest.mark.{marker}
async def test_it():
    await call(GuardMiddleware(handler, guard=make_guard()))
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*llm-guard: 1 leak in test_leaky.py::test_it*",
        "*attached object: test_leaky.Context x1, * KiB retained (sess-*)",
        "*held by: module test_leaky -> list CALLBACKS -> function handler.<locals>.on_done "
        "-> closure ctx -> Context",
    ])
    assert "closure secret" not in result.stdout.str()  # redacted: no content


@pytest.mark.parametrize("marker", ["asyncio", "anyio"])
def test_suspended_async_generator_kept_by_connection(inner: pytest.Pytester,
                                                     marker: str) -> None:
    result = run(inner, f'''
STREAMS = {{}}

async def stream_tokens(ctx):
    for word in ctx.prompt.split():
        yield word

@pytest.mark.{marker}
async def test_it():
    gen = stream_tokens(Context("one two three"))
    await gen.__anext__()
    STREAMS["conn-7"] = gen  # kept by connection id, never closed
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*suspended async generator: async_generator stream_tokens x1, * KiB retained",
        "*suspended at *test_leaky.py:* when the test ended, never closed*",
    ])
    assert ("held by: module test_leaky -> dict STREAMS -> dict['conn-…'] -> "
            "async_generator stream_tokens") in result.stdout.str()


@pytest.mark.parametrize("marker", ["asyncio", "anyio"])
def test_session_cache_never_cleared_on_disconnect(inner: pytest.Pytester, marker: str) -> None:
    result = run(inner, f'''
CONTEXTS = {{}}

async def handler(scope, receive, send):
    session = current_session()
    CONTEXTS[session.id] = session.attach(Context("cached secret"))
    await ok(send)
    await receive()  # the disconnect; nothing removes the entry

@pytest.mark.{marker}
async def test_it():
    app = GuardMiddleware(handler, guard=make_guard())
    for _ in range(3):
        await call(app)
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*llm-guard: 3 leaks in test_leaky.py::test_it*",
        "*attached object: test_leaky.Context x3, * KiB retained*",
    ])
    assert ("held by: module test_leaky -> dict CONTEXTS -> dict['sess-…'] -> Context"
            in result.stdout.str())


@pytest.mark.parametrize("marker", ["asyncio", "anyio"])
def test_task_per_connection_never_cancelled(inner: pytest.Pytester, marker: str) -> None:
    result = run(inner, f'''
async def heartbeat(session):
    while True:
        await asyncio.sleep(3600)

async def handler(scope, receive, send):
    asyncio.get_running_loop().create_task(heartbeat(current_session()))
    await ok(send)

@pytest.mark.{marker}
async def test_it():
    await call(GuardMiddleware(handler, guard=make_guard()))
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*object held by a pending task x1*",
        "*never cancelled*",
        "*held by: Task * (pending) -> * -> Session",
    ])


def test_cycle_through_object_with_del(inner: pytest.Pytester) -> None:
    # Automatic collections off in the inner run: one during the request (the session still
    # holds ctx) would revive only the Connection and report ctx as a plain attached object.
    # The cycle must die in the plugin's own gc.collect(), after the session closed.
    result = run(inner, '''
import gc
gc.disable()

PENDING_CLOSE = []

class Connection:
    def __init__(self, ctx):
        self.ctx = ctx
        self.on_data = self.handle  # bound method: a cycle through self
    def handle(self):
        pass
    def __del__(self):
        PENDING_CLOSE.append(self)  # "close it later": revives the cycle

async def handler(scope, receive, send):
    Connection(current_session().attach(Context("cycle secret")))
    await ok(send)

@pytest.mark.asyncio
async def test_it():
    await call(GuardMiddleware(handler, guard=make_guard()))
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*object revived by __del__: test_leaky.Context x1, * KiB retained*",
        "*revived by a __del__ method*",
        "*held by: module test_leaky -> list PENDING_CLOSE -> Connection -> Context ctx",
    ])


def test_unclosed_async_generator_finalised_by_gc(inner: pytest.Pytester) -> None:
    result = run(inner, '''
async def numbers():
    for i in range(10):
        yield i

@pytest.mark.asyncio
async def test_breaks_out():
    async for n in numbers():
        break  # no aclose(): the GC finalises it later
    await asyncio.sleep(0)

@pytest.mark.llm_guard_leaks(asyncgens=False)
@pytest.mark.asyncio
async def test_opted_out():
    async for n in numbers():
        break
    await asyncio.sleep(0)

@pytest.mark.asyncio
async def test_closes_it():
    gen = numbers()
    async for n in gen:
        break
    await gen.aclose()
''')
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines([
        "*unclosed async generator: numbers x1*",
        "*finalised by the garbage collector without aclose(); iterated from *test_leaky.py:*, "
        "suspended at *test_leaky.py:*",
    ])


def test_failure_names_png_graph_when_dot_exists(inner: pytest.Pytester) -> None:
    from llm_guard_sdk.leaks.deps import dot_path

    if dot_path() is None:
        pytest.skip("graphviz 'dot' is not installed")
    graphs = inner.path / "graphs"
    result = run(inner, '''
KEEP = []

@pytest.mark.asyncio
async def test_it():
    guard = make_guard()
    session = guard.registry.open("http", "/")
    KEEP.append(session.attach(Context("png secret")))
    await guard.close_session(session, CloseReason.COMPLETED)
''', f"--llm-guard-leaks-graphs={graphs}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*graph: *graphs/*.png"])
    pngs = list(graphs.glob("*.png"))
    assert len(pngs) == 1
    assert pngs[0].read_bytes().startswith(b"\x89PNG")


def test_nested_unclosed_generators_are_one_finding(inner: pytest.Pytester) -> None:
    result = run(inner, '''
async def chunks():
    for i in range(10):
        yield i

async def lines():
    async for chunk in chunks():
        yield str(chunk)

@pytest.mark.anyio
async def test_returns_mid_stream():
    async for line in lines():
        return  # like `return events` inside `async for line in response.aiter_lines()`
''')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*llm-guard: 1 leak in test_leaky.py::test_returns_mid_stream*",
        "*unclosed async generator: lines x1",
        "*(with the 1 generator(s) it was iterating: chunks)",
    ])
