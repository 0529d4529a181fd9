"""The waits of durable runs, from any process: list them, decide one, start a run and leave.

A run publishes its open waits as DBOS workflow attributes (``_waits``), so
any process with the system database lists them in one query and finds the
run that holds a wait id. A decision goes to that run as a DBOS message
(``DBOSClient.send``, which needs no launched DBOS): the run takes it at
once, or when a process resumes it. The sender checks it first the way the
run will (the verb fits the wait; an answer fits the question's JSON schema),
so a bad answer is refused to the person giving it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from typing import Any

from dbos import DBOSClient
from dbos._error import DBOSException

from groundswell import ConfigurationError, InvalidAnswer, UnknownWait, WaitClosed
from groundswell.waits import VERBS, Answered, Decision, Wait, check_approval_input

from . import _runtime
from ._waits import CLOSED_ATTR, OPEN_ATTR, message_for, topic

__all__ = ["DBOSWaits", "decide", "pending"]

_LIVE = ["PENDING", "ENQUEUED"]
_clients: dict[str, DBOSClient] = {}
_lock = threading.Lock()


def _client(url: str) -> DBOSClient:
    """One client per system database in this process (it holds a small pool)."""
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = _connect(url)
        return client


def _connect(url: str) -> DBOSClient:
    try:
        return DBOSClient(system_database_url=url, system_database_pool_size=2)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot reach the DBOS system database {_runtime._redact_url(url)}: "
            f"{type(exc).__name__}: {_runtime._first_line(exc)}"
        ) from exc


def _system_url() -> str:
    """The system database of this process's DBOS (running, configured, or the default)."""
    import dbos._dbos as dbos_state

    instance = dbos_state._dbos_global_instance
    if instance is not None:
        return str(instance._config["system_database_url"])
    return str(_runtime.settings()["system_database_url"])


def _workflow_name() -> str:
    from ._engine import WORKFLOW_NAME

    return WORKFLOW_NAME


def _wait(entry: dict[str, Any]) -> Wait:
    deadline = entry.get("deadline")
    return Wait(
        id=str(entry.get("id", "")),
        kind=str(entry.get("kind", "")),
        run_id=str(entry.get("run_id", "")),
        node_id=str(entry.get("node_id", "")),
        request=dict(entry.get("request") or {}),
        opened_at=float(entry.get("opened_at") or 0.0),
        deadline=float(deadline) if isinstance(deadline, int | float) else None,
    )


def _listed(client: DBOSClient, run_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(run id, published entry) of every open wait of the live durable runs."""
    statuses = client.list_workflows(
        name=_workflow_name(),
        status=_LIVE,
        workflow_ids=[run_id] if run_id else None,
        load_input=False,
        load_output=False,
    )
    found: list[tuple[str, dict[str, Any]]] = []
    for status in statuses:
        listed = (status.attributes or {}).get(OPEN_ATTR)
        if isinstance(listed, dict):
            found.extend((status.workflow_id, e) for e in listed.values() if isinstance(e, dict))
    return sorted(found, key=lambda item: float(item[1].get("opened_at") or 0.0))


def _open_waits(
    client: DBOSClient,
    *,
    kind: str | None = None,
    agent: str | None = None,
    run_id: str | None = None,
) -> list[Wait]:
    waits = [_wait(entry) for _, entry in _listed(client, run_id)]
    return [
        w for w in waits if (kind is None or w.kind == kind) and (agent is None or w.agent == agent)
    ]


def _find(client: DBOSClient, wait_id: str) -> tuple[str, dict[str, Any]] | str | None:
    """The run holding the open wait ``wait_id`` and its entry; how it closed; or None."""
    name = _workflow_name()
    try:
        # PostgreSQL finds the run by its attributes (an indexed containment query).
        holders = client.list_workflows(
            name=name, attributes={OPEN_ATTR: {wait_id: {}}}, load_input=False, load_output=False
        )
        closers = client.list_workflows(
            name=name, attributes={CLOSED_ATTR: {wait_id: {}}}, load_input=False, load_output=False
        )
    except DBOSException:  # SQLite filters no attributes: look through the live runs
        holders = closers = client.list_workflows(
            name=name, status=_LIVE, load_input=False, load_output=False
        )
    for status in holders:
        entry = ((status.attributes or {}).get(OPEN_ATTR) or {}).get(wait_id)
        if isinstance(entry, dict):
            if status.status in _LIVE:
                return status.workflow_id, entry
            return f"its run ended {status.status}"
    for status in closers:
        closed = ((status.attributes or {}).get(CLOSED_ATTR) or {}).get(wait_id)
        if isinstance(closed, dict):
            return str(closed.get("how") or "closed")
    return None


def _checked(wait: Wait, allowed: Any, decision: Decision) -> Decision:
    """``decision`` as the run will take it; `InvalidAnswer` if it will not."""
    verbs = tuple(allowed) if isinstance(allowed, list) and allowed else VERBS.get(wait.kind)
    if verbs is not None and decision.kind not in verbs:
        how = " or ".join(f"groundswell.waits.{v}({wait.id!r}, ...)" for v in verbs)
        raise InvalidAnswer(
            f"wait {wait.id!r} is a {wait.kind}: decide it with {how}, not {decision.kind}()",
            wait_id=wait.id,
        )
    schema = wait.request.get("schema")
    if decision.kind != "answer" or not isinstance(schema, dict):
        return decision
    value = decision.value
    if isinstance(value, str) and schema.get("type") != "string":
        # A form or a command line sends JSON text, as the run reads it too.
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    choices = schema.get("enum")
    if isinstance(value, str) and isinstance(choices, list):
        # One of a few choices, in any case (as ask_user takes it), spelled as offered.
        folded = {c.casefold(): c for c in choices if isinstance(c, str)}
        value = folded.get(value.strip().casefold(), value)
    import jsonschema  # type: ignore[import-untyped]  # MCP's dependency, untyped

    problems = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path)
    )
    if problems:
        errors = [
            {"loc": tuple(p.path), "msg": p.message, "type": str(p.validator)} for p in problems
        ]
        said = "; ".join(
            f"{'.'.join(str(x) for x in p.path) or 'the answer'}: {p.message}" for p in problems[:5]
        )
        question = wait.request.get("question")
        about = f" ({question!r:.80})" if isinstance(question, str) else ""
        raise InvalidAnswer(
            f"the answer to wait {wait.id!r}{about} does not fit: {said}. The wait stays "
            "open: answer it again",
            wait_id=wait.id,
            errors=errors,
        )
    return dataclasses.replace(decision, value=value)


def _decide(client: DBOSClient, wait_id: str, decision: Decision) -> Answered | None:
    found = _find(client, wait_id)
    if found is None:
        return None
    if isinstance(found, str):
        raise WaitClosed(
            f"wait {wait_id!r} is closed already ({found}); `groundswell pending` lists the "
            "open ones",
            wait_id=wait_id,
            closed=found,
        )
    run_id, entry = found
    wait = _wait(entry)
    decision = _checked(wait, entry.get("verbs"), decision)
    sent_at = time.time()
    message = message_for(wait_id, decision, sent_at)
    # The same decision sent twice (a retried request) is delivered once.
    same = json.dumps({**message, "sent_at": None}, sort_keys=True, default=str)
    key = f"{wait_id}:{hashlib.sha256(same.encode()).hexdigest()[:16]}"
    client.send(run_id, message, topic(wait_id), idempotency_key=key)
    return Answered(wait, dataclasses.replace(decision, at=sent_at))


async def decide(wait_id: str, decision: Decision) -> Answered | None:
    """Send ``decision`` to the durable run holding the wait ``wait_id`` (`RemoteWaits`)."""
    client = await asyncio.to_thread(_client, _system_url())
    return await asyncio.to_thread(_decide, client, wait_id, decision)


async def pending(
    *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
) -> list[Wait]:
    """The open waits of the durable runs in this process's system database, oldest first.

    Every process sees the same list: each run publishes its waits in the
    database. ``kind``, ``agent`` and ``run_id`` (a run's workflow id) filter it.
    """
    client = await asyncio.to_thread(_client, _system_url())
    return await asyncio.to_thread(_open_waits, client, kind=kind, agent=agent, run_id=run_id)


class DBOSWaits:
    """The waits of durable runs in the DBOS system database at ``url``, as a
    `groundswell.waits.client.WaitsClient`: ``groundswell pending --url
    postgresql://...`` and the other commands reach them without a server. The
    database's own credentials (in the URL) are the access control; ``token`` is
    not used."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self._client = _connect(url)

    def pending(
        self, *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
    ) -> list[Wait]:
        return _open_waits(self._client, kind=kind, agent=agent, run_id=run_id)

    def approve(
        self, wait_id: str, *, input: dict[str, Any] | None = None, by: str | None = None
    ) -> Answered:
        check_approval_input(wait_id, input)
        return self._send(wait_id, Decision.approve(input, by=by))

    def reject(self, wait_id: str, reason: str, *, by: str | None = None) -> Answered:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidAnswer(
                f"reject({wait_id!r}, reason): give the reason as a non-empty string",
                wait_id=str(wait_id),
            )
        return self._send(wait_id, Decision.reject(reason, by=by))

    def answer(self, wait_id: str, value: Any, *, by: str | None = None) -> Answered:
        return self._send(wait_id, Decision.answer(value, by=by))

    def close(self) -> None:
        self._client.destroy()

    def _send(self, wait_id: str, decision: Decision) -> Answered:
        answered = _decide(self._client, wait_id, decision)
        if answered is None:
            raise UnknownWait(
                f"no durable run in {_runtime._redact_url(self.url)} has an open wait "
                f"{wait_id!r}; `groundswell pending --url ...` lists them",
                wait_id=wait_id,
            )
        return answered
