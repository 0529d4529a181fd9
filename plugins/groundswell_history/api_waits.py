"""Waits over HTTP: ``GET /api/waits`` and ``POST /api/waits/{wait_id}/approve|reject|answer``.

The routes list and decide the open waits of the process they run in
(`groundswell.waits`), with the history API's tokens: a wait belongs to the
agent its request names (``Wait.agent``: an approval's agent, an agent's
``ask_user`` question). An agent's token sees and decides only its agent's
waits; another agent's wait, and a wait with no agent (a workflow's
``ctx.ask``), is a 404 to it, as if it did not exist, and naming another
agent in ``?agent=`` is a 403. An operator token sees and decides every wait.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Annotated, Any

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

import groundswell
from groundswell import InvalidAnswer, UnknownWait, WaitClosed
from groundswell.waits import Answered, Wait

from .api_gate import Credentials, Gate
from .api_models import AGENT_ID_PATTERN, TEXT_PATTERN, Problem
from .auth import Caller

__all__ = ["add_wait_routes"]

WaitId = Annotated[
    str,
    Path(min_length=1, max_length=64, description="the wait's id (GET /api/waits lists them)"),
]
#: How many waits' agents are remembered after they close, to answer "closed" (409)
#: to their agent's token rather than "no such wait" (404).
SEEN_KEPT = 10_000
_DESCRIPTIONS = {
    401: "no token, or not a valid token",
    403: "?agent= names another agent than the token's",
    404: "no open wait with this id among the token's waits",
    409: "the wait was answered, timed out or cancelled already",
    422: "invalid parameters or body, or an answer that does not fit the wait (see message)",
}


def _refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Problem, "description": _DESCRIPTIONS[code]} for code in statuses}


_By = Field(
    default=None,
    min_length=1,
    max_length=200,
    pattern=TEXT_PATTERN,
    description="on whose behalf the token's holder decides: recorded on the wait's node as "
    '"<token> for <by>" (the token always names who decided)',
)


class ApproveBody(BaseModel):
    """Approve an approval wait; ``input`` replaces the tool's input."""

    model_config = ConfigDict(extra="forbid")
    input: dict[str, Any] | None = Field(
        default=None, description="the tool input to use instead (default: unchanged)"
    )
    by: str | None = _By


class RejectBody(BaseModel):
    """Reject an approval wait, saying why (the agent is told the reason)."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=10_000, description="why (required)")
    by: str | None = _By


class AnswerBody(BaseModel):
    """Answer a question wait."""

    model_config = ConfigDict(extra="forbid")
    value: Any = Field(
        description="the answer: text, or JSON fitting the question's schema (a JSON string "
        "is read as the value when the question asks for something other than text)"
    )
    by: str | None = _By


def _may_see(caller: Caller, wait_agent: str | None) -> bool:
    # A wait no agent asked for (a workflow's ctx.ask) is an operator's to see.
    return caller.operator or (wait_agent is not None and caller.name == wait_agent)


def _shown(wait: Wait) -> dict[str, Any]:
    shown: dict[str, Any] = groundswell.redact(wait.to_dict())
    return shown


def add_wait_routes(app: FastAPI, gate: Gate) -> None:
    """Add the ``/api/waits`` routes to ``app`` (made by ``make_app``)."""
    seen_lock = threading.Lock()
    # wait id -> its agent, for the waits this app has shown or decided.
    seen: OrderedDict[str, str | None] = OrderedDict()

    def remember(waits: list[Wait]) -> None:
        with seen_lock:
            for wait in waits:
                seen[wait.id] = wait.agent
                seen.move_to_end(wait.id)
            while len(seen) > SEEN_KEPT:
                seen.popitem(last=False)

    @app.get(
        "/api/waits",
        summary="The open waits the token may see, oldest first",
        responses=_refusals(401, 403, 422),
    )
    def list_waits(
        request: Request,
        kind: Annotated[
            str | None,
            Query(min_length=1, max_length=100, description='only this kind ("approval", ...)'),
        ] = None,
        agent: Annotated[
            str | None,
            Query(
                min_length=1,
                pattern=AGENT_ID_PATTERN,
                description="only this agent's (an agent's token: its own only)",
            ),
        ] = None,
        run_id: Annotated[
            str | None, Query(min_length=1, max_length=200, description="only this run's")
        ] = None,
        credentials: Credentials = None,
    ) -> Any:
        record: dict[str, Any] = {"query": {"kind": kind, "agent": agent, "run_id": run_id}}
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        if agent is not None and not caller.may_see(agent):
            return gate.refuse(
                request,
                403,
                f"this token belongs to agent {caller.name!r}; it sees only that agent's waits "
                "(to see every wait, use an operator token: `groundswell history token "
                "--operator`)",
                record,
            )
        waits = [
            wait
            for wait in groundswell.waits.pending()
            if _may_see(caller, wait.agent)
            and (kind is None or wait.kind == kind)
            and (agent is None or wait.agent == agent)
            and (run_id is None or wait.run_id == run_id)
        ]
        remember(waits)
        record.update(status=200, count=len(waits))
        gate.record(request, record)
        return {"count": len(waits), "waits": [_shown(w) for w in waits]}

    def decide(
        request: Request,
        credentials: Any,
        wait_id: str,
        verb: str,
        record: dict[str, Any],
        body: ApproveBody | RejectBody | AnswerBody,
    ) -> Any:
        record.update(wait_id=wait_id, verb=verb)
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        open_now = next((w for w in groundswell.waits.pending() if w.id == wait_id), None)
        if open_now is not None:
            remember([open_now])
            allowed = _may_see(caller, open_now.agent)
        else:
            with seen_lock:
                allowed = caller.operator or (wait_id in seen and _may_see(caller, seen[wait_id]))
        whose = "" if caller.operator else f" among agent {caller.name!r}'s waits"
        if not allowed:
            return gate.refuse(
                request,
                404,
                f"no open wait {wait_id!r}{whose} (GET /api/waits lists the open ones)",
                record,
            )
        # The token says who decided; a body can only add on whose behalf, never replace it.
        by = caller.label if body.by is None else f"{caller.label} for {body.by}"
        try:
            if isinstance(body, ApproveBody):
                answered = groundswell.waits.approve(wait_id, input=body.input, by=by)
            elif isinstance(body, RejectBody):
                answered = groundswell.waits.reject(wait_id, body.reason, by=by)
            else:
                answered = groundswell.waits.answer(wait_id, body.value, by=by)
        except WaitClosed as exc:
            message = f"wait {wait_id!r} is closed already ({exc.closed})"
            record.update(status=409, error=message)
            gate.record(request, record)
            content = {"detail": message, "message": message, "closed": exc.closed}
            return JSONResponse(status_code=409, content=content)
        except UnknownWait:
            return gate.refuse(
                request,
                404,
                f"no open wait {wait_id!r}{whose} (GET /api/waits lists the open ones)",
                record,
            )
        except InvalidAnswer as exc:
            record.update(status=422, error=str(exc))
            gate.record(request, record)
            detail = groundswell.redact(
                jsonable_encoder(exc.errors, custom_encoder={Exception: str})
            )
            return JSONResponse(
                status_code=422, content={"detail": detail, "message": groundswell.scrub(str(exc))}
            )
        return answered_record(request, record, answered)

    def answered_record(request: Request, record: dict[str, Any], answered: Answered) -> Any:
        decision = answered.decision
        record.update(status=200, decision=decision.kind, by=decision.by, agent=answered.wait.agent)
        gate.record(request, record)
        shown: dict[str, Any] = groundswell.redact(
            jsonable_encoder(
                {
                    "wait": answered.wait.to_dict(),
                    "decision": {
                        "kind": decision.kind,
                        "input": decision.input,
                        "reason": decision.reason,
                        "value": decision.value,
                        "by": decision.by,
                        "at": decision.at,
                    },
                }
            )
        )
        return shown

    responses = _refusals(401, 404, 409, 422)

    @app.post(
        "/api/waits/{wait_id}/approve",
        summary="Approve an approval wait (optionally with another tool input)",
        responses=responses,
    )
    def approve(
        request: Request,
        wait_id: WaitId,
        body: Annotated[ApproveBody | None, Body()] = None,
        credentials: Credentials = None,
    ) -> Any:
        return decide(request, credentials, wait_id, "approve", {}, body or ApproveBody())

    @app.post(
        "/api/waits/{wait_id}/reject",
        summary="Reject an approval wait, saying why",
        responses=responses,
    )
    def reject(
        request: Request, wait_id: WaitId, body: RejectBody, credentials: Credentials = None
    ) -> Any:
        return decide(request, credentials, wait_id, "reject", {}, body)

    @app.post(
        "/api/waits/{wait_id}/answer",
        summary="Answer a question wait",
        responses=responses,
    )
    def answer(
        request: Request, wait_id: WaitId, body: AnswerBody, credentials: Credentials = None
    ) -> Any:
        return decide(request, credentials, wait_id, "answer", {}, body)
