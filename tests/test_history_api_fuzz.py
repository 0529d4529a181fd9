"""Schemathesis fuzzes the history API from its own OpenAPI schema: no 5xx, ever.

The server is real (uvicorn on loopback) over a real store (SQLite and
PostgreSQL) holding sessions of the agent the token belongs to.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from groundswell_history import HistoryStore, create_app, task_signature
from groundswell_history.api import issue_token
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from .test_history_api import SECRET, Server

# A few reproducible examples per operation (each gets a run of its own), which reach
# every query parameter in both modes. Derandomized: the seed comes from the source of
# the test function, so editing it changes the examples.
FUZZ = settings(
    max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
# Not negative_data_rejection: the token given here replaces a broken Authorization
# header a negative case may hold, which makes that case a valid request (whether a
# run passed then hung on which examples the seed gave). The refusals of invalid
# requests are tested one by one in test_history_api.py.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture
def server(history_store: HistoryStore) -> Iterator[Server]:
    now = time.time()
    signature = task_signature("Fuzz target", "qa")
    for n in range(12):
        sid = f"fuzz-{n}"
        history_store.start_session(
            sid, "alice", started_at=now - n * 3600, task_signature=signature if n % 2 else None
        )
        history_store.add_iteration(sid, "tool_call", name="lookup", input={"q": n}, output="ok")
        history_store.end_session(sid, "failed" if n % 3 == 0 else "completed", output=f"out {n}")
    with Server(create_app(history_store, secret=SECRET)) as running:
        yield running


def operations(server: Server) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    found = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in found} == {
        "/api/health",
        "/api/introspection/{agent_id}",
        "/api/sessions",
        "/api/sessions/{session_id}",
        "/api/sessions/{session_id}/iterations",
        "/api/sessions/{session_id}/terminate",
        "/api/retries",
        "/api/failures",
        "/api/usage",
    }
    return found


TOKEN = {"Authorization": f"Bearer {issue_token('alice', SECRET)}"}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_any_request_gets_a_documented_answer_never_a_server_error(
    server: Server, mode: GenerationMode
) -> None:
    # Any agent id with the token of one agent: 200 for it, 403 for the others,
    # 422 for bad parameters; bodies and status codes must match the schema.
    for operation in operations(server):
        if mode is GenerationMode.NEGATIVE and operation.path == "/api/health":
            continue  # no parameters: there is no invalid request to make

        @given(case=operation.as_strategy(generation_mode=mode))
        @FUZZ
        def run(case: Any) -> None:
            case.call_and_validate(headers=TOKEN, checks=CHECKS)

        run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_owner_fuzzing_every_parameter_reaches_the_store_safely(
    server: Server, mode: GenerationMode
) -> None:
    (query,) = [op for op in operations(server) if op.path.startswith("/api/introspection")]

    @given(case=query.as_strategy(generation_mode=mode, path_parameters={"agent_id": "alice"}))
    @FUZZ
    def run(case: Any) -> None:
        response = case.call_and_validate(headers=TOKEN, checks=CHECKS)
        # Negative cases may also drop the token (401); never another agent's 403.
        assert response.status_code in (200, 401, 422), response.text

    run()


def test_without_a_token_every_request_is_refused_cleanly(server: Server) -> None:
    (query,) = [op for op in operations(server) if op.path.startswith("/api/introspection")]

    @given(case=query.as_strategy())
    @FUZZ
    def run(case: Any) -> None:
        response = case.call()
        assert response.status_code == 401, response.text

    run()
