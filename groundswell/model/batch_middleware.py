"""``batch=True``: model calls go through the Message Batches API, at half the price.

On `Agent`, `Prompt`, `PromptOverrides` (the usual precedence) or
``@workflow(batch=...)``, a default for the prompts inside that set nothing.
Each model turn of such a prompt joins the batch its client is collecting
(`groundswell.model.batching`): turns that wait at the same time, of any prompts,
go in one batch, and each waits for its own result. A tool loop goes on turn
by turn, each turn in a batch of its own.

The turn is still the loop's own ``model_call`` node (usage, stop reasons and
tool calls as for a direct call): for its duration the prompt's client is
swapped for `_Batched`, whose ``messages.create`` sends the request in a batch.
The node's ``payload["batch"]`` holds the batch's ``id`` and the request's
``custom_id`` (batches are billed at half the standard price), a
``batch_wait`` event says which batch it waits for, and
``metrics["batch_wait_s"]`` how long it waited. In a durable run the ticket
goes through the engine's ``once``: checkpointed once the batch exists, so a
recovered run waits for that batch instead of sending the request again.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, cast

from ..agent import Middleware, ModelNext, PromptRun
from ..cache.canonical import canonical_bytes
from ..errors import ConfigurationError
from ..tree.node import own_metrics
from ..tree.tree import EventNode, NodeStatus, NodeType
from .batching import BatchTicket, message_of, split_request, submit, wait_result

if TYPE_CHECKING:
    import anthropic

__all__ = ["Batch"]


class Batch(Middleware):
    """Send each model turn of a ``batch=True`` prompt through a Message Batch."""

    name = "batch"
    # Innermost of the model-call layers: the others see the call's SDK Message as usual.
    order = 950

    # The workflow's default is folded into the settings of a prompt that sets nothing
    # (`Agent._execute`), so the agent's settings decide a plain call.
    per_agent = True

    def active(self, run: PromptRun) -> bool:
        return bool(run.settings.get("batch"))

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        if run.streaming:
            raise ConfigurationError(
                f"agent {run.agent.name!r}: batch=True sends model calls through the Message "
                "Batches API, which does not stream; use agent.prompt() or agent.run() for a "
                "batched prompt, or PromptOverrides(batch=False) to stream this one"
            )
        client = run.client
        # What the loop's model call sends through: it reaches only messages.create (or
        # beta.messages.create) and max_retries, which `_Batched` has.
        run.client = cast("anthropic.AsyncAnthropic", _Batched(run, client))
        try:
            return await call_next(request)
        finally:
            run.client = client


class _Batched:
    """Stands in for the prompt's client during one model call: ``messages.create`` (and
    ``beta.messages.create``) send the request in a Message Batch and return its answer."""

    # An errored result is not sent again in a new batch: it fails the call as it is.
    max_retries = 0

    def __init__(self, run: PromptRun, client: Any) -> None:
        self.messages = _Messages(run, client, beta=False)
        self.beta = _Beta(_Messages(run, client, beta=True))


class _Beta:
    __slots__ = ("messages",)

    def __init__(self, messages: _Messages) -> None:
        self.messages = messages


class _Messages:
    __slots__ = ("beta", "client", "run")

    def __init__(self, run: PromptRun, client: Any, *, beta: bool) -> None:
        self.run, self.client, self.beta = run, client, beta

    async def create(self, **params: Any) -> Any:
        run, client = self.run, self.client
        body, headers = split_request(params)
        node = _call_node(run)
        started = time.monotonic()
        ticket = await _ticket(run, node, client, body, headers, beta=self.beta)
        waiting = f"waiting for Message Batch {ticket.batch_id}"
        if node is not None:
            node.payload["batch"] = {"id": ticket.batch_id, "custom_id": ticket.custom_id}
            run.tree.add_event(
                node, "batch_wait", batch_id=ticket.batch_id, custom_id=ticket.custom_id
            )
        run.notify("batch_wait", f"The model call is {waiting}")
        try:
            result = await wait_result(client, ticket)
        finally:
            if node is not None:
                own_metrics(node)["batch_wait_s"] = round(time.monotonic() - started, 3)
        return message_of(result, client, ticket)


async def _ticket(
    run: PromptRun,
    node: EventNode | None,
    client: Any,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    beta: bool,
) -> BatchTicket:
    """Submit the request; in a durable run, through the engine's ``once``.

    A durable engine checkpoints the ticket once the batch exists, so a
    recovery that reaches this call again (the same request, at the same
    place in the run) waits for the recorded batch instead of sending the
    request again. Only the batch id, the ``custom_id`` and the namespace are
    recorded: the headers may hold ``extra_headers`` secrets, and are the
    request's own again on recovery.
    """
    custom_id = node.id if node is not None else None
    workflow = run.workflow
    once = getattr(workflow.engine, "once", None) if workflow is not None else None
    if once is None or node is None:
        return await submit(client, body, beta=beta, headers=headers, custom_id=custom_id)

    async def send(_key: str | None) -> dict[str, Any]:
        ticket = await submit(client, body, beta=beta, headers=headers, custom_id=custom_id)
        return {"batch_id": ticket.batch_id, "custom_id": ticket.custom_id, "beta": ticket.beta}

    # Keyed like a tool call: this agent, this request, at this place in the run. The
    # node's id differs on every recovery, so it cannot name the operation.
    digest = hashlib.sha256(canonical_bytes({"beta": beta, "body": body})).hexdigest()[:12]
    recorded = await once(workflow, node, f"batch {run.agent.name} {digest}", send)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("batch_id"), str):
        raise ConfigurationError(
            f"agent {run.agent.name!r}: the checkpointed Message Batch ticket of this model "
            f"call is not readable ({type(recorded).__name__}); run recovering processes "
            "with the same Groundswell version that started the run"
        )
    return BatchTicket(
        recorded["batch_id"], str(recorded["custom_id"]), bool(recorded["beta"]), headers
    )


def _call_node(run: PromptRun) -> EventNode | None:
    """The ``model_call`` node of the call in flight: the prompt node's newest child."""
    children = run.node.children
    node = children[-1] if children else None
    if node is not None and node.type is NodeType.MODEL_CALL and node.status is NodeStatus.RUNNING:
        return node
    return None
