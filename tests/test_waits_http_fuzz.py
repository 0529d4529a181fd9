"""Schemathesis fuzzes the waits API from its own OpenAPI schema: no 5xx, ever, and only
documented answers. The server is real (uvicorn on loopback) and the waits are real:
workflows waiting on a question and an approval, run on an event loop of their own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import schemathesis
from groundswell_history import serve_app
from groundswell_history.auth import issue_operator_token, issue_token
from hypothesis import given
from schemathesis import GenerationMode
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

import groundswell
from groundswell import WorkflowContext, workflow

from .test_history_api import SECRET, Server
from .test_history_api_fuzz import FUZZ
from .test_waits_http import gated

OPERATOR = {"Authorization": f"Bearer {issue_operator_token('ops', SECRET)}"}
ALICE = {"Authorization": f"Bearer {issue_token('alice', SECRET)}"}
# Not negative_data_rejection: the token given here replaces a broken Authorization
# header a negative case may hold, which makes that case a valid request. The refusals
# of invalid requests are tested one by one in test_waits_http.py.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@workflow(name="count")
async def count(ctx: WorkflowContext) -> int:
    return int(await ctx.ask("How many?", int))


class Runs:
    """Workflows waiting on a loop in a thread of their own, as in an app serving them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.tasks: list[asyncio.Task[Any]] = []

    def start(self, *runs: Callable[[], Awaitable[Any]]) -> None:
        async def start() -> None:
            self.tasks.extend(asyncio.ensure_future(run()) for run in runs)

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def stop(self) -> None:
        async def stop() -> None:
            for task in self.tasks:
                task.cancel()
            # Cancelled, or ended on their own: either way over, on their loop.
            await asyncio.gather(*self.tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[tuple[Server, list[str]]]:
    runs = Runs()
    runs.start(count.run, lambda: gated.run("alice", "delete_file"))
    deadline = time.monotonic() + 10
    while len(groundswell.waits.pending()) < 2:
        assert time.monotonic() < deadline, "the waits did not open"
        time.sleep(0.01)
    ids = [w.id for w in groundswell.waits.pending()]
    try:
        with Server(serve_app(secret=SECRET)) as running:
            yield running, ids
    finally:
        runs.stop()


def operations(server: Server) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    found = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in found} == {
        "/api/health",
        "/api/waits",
        "/api/waits/{wait_id}/approve",
        "/api/waits/{wait_id}/reject",
        "/api/waits/{wait_id}/answer",
        # The dev UI's (tests/test_ui_api.py), fuzzed here too.
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/nodes/{node_id}",
        "/api/runs/{run_id}/events",
        "/api/workflows",
        "/api/workflows/{name}/run",
    }
    return [op for op in found if op.path != "/api/health"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("token", [OPERATOR, ALICE], ids=["operator", "agent"])
def test_any_request_gets_a_documented_answer_never_a_server_error(
    server: tuple[Server, list[str]], mode: GenerationMode, token: dict[str, str]
) -> None:
    running, ids = server
    for operation in operations(running):
        # Random ids (404s) and the open waits' own (decided, refused or 409 once closed).
        for path in [{}, *({"wait_id": i} for i in ids)] if "{wait_id}" in operation.path else [{}]:

            @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path))
            @FUZZ
            def run(case: Any) -> None:
                response = case.call_and_validate(headers=token, checks=CHECKS)
                assert response.status_code < 500, response.text

            run()
