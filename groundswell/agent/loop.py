"""The agent loop: a prompt becomes model turns and tool calls, through the middleware seams.

Three named steps over one `PromptRun`: `attempt` starts the prompt node and
the conversation, `turns` sends model turns until the model answers, and
`tool_call` (in `groundswell.agent.tool_calls`) runs one tool the model asked
for. Every feature reaches them only
through the layers of `groundswell.agent.middleware`; nothing here knows of
caches, reflection, budgets or hooks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from ..budget.pricing import LIVE_SPENDS, SPEND, cache_share, charge
from ..cache.markers import auto_cache
from ..errors import (
    ConfigurationError,
    GroundswellError,
    MaxTurnsExceeded,
    PluginError,
    ResponseValidationError,
)
from ..model.calls import api_error, call_model, is_retryable_stream_error
from ..runtime.context import Frame, current_frame, enter_frame, reset_frame, set_frame
from ..scrubbing.serialize import MAX_ITEMS as _MAX_ITEMS
from ..scrubbing.serialize import jsonable, jsonable_text
from ..tree.node import own_metrics
from ..tree.tree import NodeStatus, NodeType
from .middleware import NO_LAYERS, Layer, Layers
from .names import UNNAMED, note_unnamed
from .replies import (
    PLAIN,
    block_dict,
    continue_after_cut,
    cut_call,
    is_final,
    malformed,
    reply_blocks,
    stopped,
)
from .run import PromptResult, PromptRun, StreamEvent
from .tool_calls import tool_call

__all__ = ["MID_STREAM_RETRIES", "is_final", "run_prompt"]

MID_STREAM_RETRIES = 2
_PREVIEW = 2_000


def run_prompt(run: PromptRun, layers: Layers) -> Awaitable[PromptResult[Any]]:
    """Run ``run`` through its layers: outer ``wrap_prompt`` layers, then each attempt.

    Returns the awaitable: with no outer layer (the common case) the attempt's own
    coroutine, so a prompt awaits one coroutine less.
    """
    if not layers.outer_prompt:
        return _attempt(run, layers)
    if run.base_settings is run.agent.config:  # an outer layer may write to them: a copy
        run.base_settings = dict(run.base_settings)
    run.settings = run.base_settings  # no longer the read-only view active() had
    return _outer(run, layers)


async def _outer(run: PromptRun, layers: Layers) -> PromptResult[Any]:
    async def attempt() -> PromptResult[Any]:
        return await _attempt(run, layers)

    retrying = [la.name for la in layers.outer_prompt if la.middleware.retries]
    if not retrying or current_frame() is not None:
        return await _prompt_layers(layers.outer_prompt, 0, run, attempt)
    # Outside any run the attempts need one tree to share: a prompt node holds them.
    tree, agent = run.tree, run.agent
    root = tree.start_node(
        NodeType.PROMPT, agent.name, None, payload={"agent": agent.name, "retried_by": retrying}
    )
    token = set_frame(Frame(tree, root))
    try:
        result = await _prompt_layers(layers.outer_prompt, 0, run, attempt)
    except BaseException as exc:
        tree.end_node_after(root, exc)
        raise
    finally:
        reset_frame(token)
    root.metrics["usage"] = dict(result.usage)
    cache_share(root.metrics, result.usage)
    root.metrics["attempts"] = result.node.metrics.get("attempt", 1)
    tree.end_node(root, NodeStatus.COMPLETED, output=result.output, record_output=True)
    return result


async def _prompt_layers(
    chain: tuple[Layer, ...], i: int, run: PromptRun, core: Any
) -> PromptResult[Any]:
    if i == len(chain):
        result: PromptResult[Any] = await core()
        return result
    layer = chain[i]
    passed: list[BaseException] = []

    async def call_next() -> PromptResult[Any]:
        try:
            return await _prompt_layers(chain, i + 1, run, core)
        except BaseException as exc:
            passed.append(exc)
            raise

    try:
        result = await layer.middleware.wrap_prompt(run, call_next)
    except Exception as exc:
        if _own_failure(exc, passed):
            raise _blame(layer, exc) from exc
        raise
    if not isinstance(result, PromptResult):
        raise _broken(layer, "wrap_prompt", result, "the PromptResult of `await call_next()`")
    return result


def _own_failure(exc: Exception, passed: list[BaseException]) -> bool:
    """True for a middleware's own unexpected error (not one from deeper, nor a deliberate one)."""
    return not isinstance(exc, GroundswellError) and not any(exc is seen for seen in passed)


def _broken(layer: Layer, seam: str, got: Any, want: str) -> PluginError:
    """The prompt's error for a seam that returned the wrong thing: it names the middleware."""
    return PluginError(
        f"agent middleware {layer.name!r} broke the {seam} contract: it returned "
        f"{type(got).__name__} {got!r:.60}, but must return {want} (see docs/middleware.md)",
        plugin=layer.name,
    )


def _blame(layer: Layer, exc: Exception) -> PluginError:
    """The prompt's error for a middleware's own failure: it names the middleware."""
    return PluginError(
        f"agent middleware {layer.name!r} failed: {type(exc).__name__}: {exc}", plugin=layer.name
    )


async def _attempt(run: PromptRun, layers: Layers) -> PromptResult[Any]:
    """One attempt of the prompt: its ``prompt`` node, conversation and inner layers."""
    agent, prompt, tree = run.agent, run.prompt, run.tree
    settings = run.base_settings
    fmt = prompt.output_type
    # Scrubbed field by field, exactly as `jsonable(payload)` would (strings
    # redacted and cut, data one level down), without walking the dict.
    payload: dict[str, Any] = {
        "agent": jsonable_text(agent.name),
        "model": jsonable_text(str(settings["model"])),
        "user": jsonable_text(prompt.user),
        # e.g. "list[Quote]"
        "response_format": jsonable_text(fmt.name) if fmt is not None else None,
    }
    if prompt.data is not None:
        payload["data"] = jsonable(prompt.data, 1)
    if run.payload:
        payload.update(jsonable(run.payload))
    outer = current_frame()
    if outer is None and run.has_node:
        raise ConfigurationError(
            f"agent {agent.name!r}: a middleware ran the prompt again outside any run, where "
            "the attempts have no node to share; set `retries = True` on the middleware "
            "whose wrap_prompt calls call_next() more than once"
        )
    if outer is not None and agent.name == UNNAMED:
        note_unnamed(tree, agent)
    node = tree.start_node(
        NodeType.PROMPT, agent.name, outer.node if outer else None, payload=payload, trusted=True
    )
    metrics = own_metrics(node)
    if run.attempt is not None:
        metrics["attempt"] = run.attempt
    # Settings only a middleware writes to: with none taking part, the attempt reads them
    # where they are.
    run.begin_attempt(node, copy_settings=layers is not NO_LAYERS)
    usage = run.usage
    token = enter_frame(tree, node, run.workflow, agent)
    try:
        user = prompt.render()
        if run.retry_note:
            user = f"{user}\n\n{run.retry_note}"
        run.messages.append({"role": "user", "content": user})
        if run.retry_messages:
            run.messages.extend(run.retry_messages)
        for item in settings.get("tools") or ():
            run.tools.add(item)

        if layers.inner_prompt:

            async def turns() -> PromptResult[Any]:
                return await _turns(run, layers)

            result = await _prompt_layers(layers.inner_prompt, 0, run, turns)
        else:
            result = await _turns(run, layers)
        if run.streaming:  # completed only while the stream's consumer is still reading
            await run.caught_up()
        if run.has_deferred:
            await run.run_deferred()
    except BaseException as exc:
        if run.has_deferred:
            run.drop_deferred()
        metrics["usage"] = usage  # its prompt_cache_share is worked out when read
        _record_system(run)
        tree.end_node_after(node, exc)
        raise
    finally:
        reset_frame(token)
    # Its cost, and the share of its input read from the prompt cache, are worked out
    # when read (`groundswell.tree.node`).
    metrics["usage"] = usage
    metrics["turns"] = result.turns
    if run.system:  # `_record_system`, inline on the way every prompt takes
        node.payload["system"] = jsonable(run.system)
    tree.end_node(node, NodeStatus.COMPLETED, output=result.output, record_output=True)
    result.tree, result.node, result.usage = tree, node, usage
    return result


def _record_system(run: PromptRun) -> None:
    if run.system:
        run.node.payload["system"] = jsonable(run.system)


async def _turns(run: PromptRun, layers: Layers) -> PromptResult[Any]:
    """Model turns until the model answers; its answer parsed and validated."""
    tree, node, messages = run.tree, run.node, run.messages
    max_turns = run.settings["max_turns"]
    # Automatic prompt caching (`prompt_cache` True, "5m" or "1h") is one field, added
    # after every before_model layer (so their markers are counted), with no layer of
    # its own; the request a cache key is made from (`run.request()`) never holds it.
    auto = run.settings.get("prompt_cache")
    if not (auto is True or auto.__class__ is str):  # "5m"/"1h" (checked); not breakpoints
        auto = None
    why = "check the tools it keeps calling"
    for turn in range(1, max_turns + 1):
        request = run.request()
        for layer in layers.before_model:
            try:
                request = await layer.middleware.before_model(run, request)
            except Exception as exc:
                if _own_failure(exc, []):
                    raise _blame(layer, exc) from exc
                raise
            if type(request) is not dict:
                raise _broken(layer, "before_model", request, "the request dict it was given")
        if auto is not None:  # automatic prompt caching: one top-level field, set last
            auto_cache(request, auto)
        text: str | None = None
        if layers.model:
            message = await _model_layers(layers.model, 0, run, request)
            content = [block_dict(b) for b in message.content]
            if message.stop_reason not in PLAIN:  # a middleware's own reply: no turn checked it
                error = stopped(run, None, message, content, _text_of(content))
                if error is not None:
                    raise error
        else:
            # Nothing stands between the model turn and here: its blocks (and text)
            # are the message's, so they are converted once, not twice.
            # A bare request (`PromptRun.bare_request`) with no automatic caching is
            # known not to need the beta namespace.
            beta = False if auto is None and run.bare_request else None
            message, content, text = await _model_turn(run, request, beta)
        stop = message.stop_reason
        if stop == "max_tokens" and cut_call(content) is not None:
            content = continue_after_cut(run, content)  # continue_on_max_tokens is on
        if content:  # the API rejects an empty assistant turn; consecutive user turns merge
            messages.append({"role": "assistant", "content": content})
        if stop == "tool_use":
            calls = [b for b in content if b.get("type") == "tool_use"]
            if calls:
                results = await asyncio.gather(*(tool_call(run, layers, c) for c in calls))
                messages.append({"role": "user", "content": list(results)})
                continue
        if stop == "pause_turn" or stop == "compaction":
            continue  # a server tool or compaction paused the turn: send it back to go on
        pending = run.pop_continuation()
        if pending is not None:
            text, why = pending
            messages.append({"role": "user", "content": text})
            continue
        if stop == "max_tokens":
            tree.add_event(node, "truncated", max_tokens=run.settings["max_tokens"])
        if text is None:
            text = _text_of(content)
        try:
            fmt = run.prompt.output_type
            output = text if fmt is None else fmt.parse(text)
        except ResponseValidationError as exc:
            if stop == "max_tokens":
                exc.args = (
                    f"the reply was cut off at max_tokens={run.settings['max_tokens']}; {exc}",
                )
            raise
        return PromptResult(output=output, tree=tree, node=node, messages=messages, turns=turn)
    raise MaxTurnsExceeded(
        f"agent {run.agent.name!r} did not finish within max_turns={max_turns} model turns; "
        f"raise max_turns or {why}"
    )


async def _model_layers(chain: tuple[Layer, ...], i: int, run: PromptRun, request: Any) -> Any:
    if i == len(chain):
        return (await _model_turn(run, request))[0]
    layer = chain[i]
    passed: list[BaseException] = []

    async def call_next(changed: dict[str, Any]) -> Any:
        try:
            return await _model_layers(chain, i + 1, run, changed)
        except BaseException as exc:
            passed.append(exc)
            raise

    try:
        message = await layer.middleware.wrap_model_call(run, request, call_next)
    except Exception as exc:
        if _own_failure(exc, passed):
            raise _blame(layer, exc) from exc
        raise
    if not hasattr(message, "stop_reason") or not isinstance(
        getattr(message, "content", None), list
    ):
        want = "the SDK Message of `await call_next(request)` (or one it builds)"
        raise _broken(layer, "wrap_model_call", message, want)
    return message


async def model_turn(run: PromptRun, params: dict[str, Any]) -> Any:
    """One model round trip as a ``model_call`` node (mid-stream breaks are retried)."""
    return (await _model_turn(run, params))[0]


async def _model_turn(
    run: PromptRun, params: dict[str, Any], beta: bool | None = None
) -> tuple[Any, list[Any], str]:
    """`model_turn`, also giving the reply's blocks as dicts and its text (for `_turns`);
    ``beta`` as `call_model` takes it."""
    tree, parent, usage = run.tree, run.node, run.usage
    streaming = run.streaming
    model = str(params["model"])
    tools = params.get("tools")
    request: dict[str, Any] = {
        "model": params["model"],
        "max_tokens": params["max_tokens"],
        "messages": len(params["messages"]),
        "tools": [t.get("name") for t in tools] if tools else [],
        "stream": streaming,
    }
    sampling = params.get("extra_body")
    if sampling:
        for name in ("temperature", "top_p", "top_k"):
            if isinstance(sampling.get(name), int | float):
                request[name] = sampling[name]
    if params.get("stop_sequences"):
        request["stop_sequences"] = jsonable(list(params["stop_sequences"]))
    max_wait = run.settings.get("max_retry_wait")  # None: call_model's default
    attempt = 0
    while True:
        attempt += 1
        node = tree.start_node(
            NodeType.MODEL_CALL,
            model,
            parent,
            # Model and tool names, counts and flags only: nothing to scrub.
            payload={"request": request},
            trusted=True,
        )
        on_delta: Any = None
        if streaming:  # the counters and the callback only for a stream
            deltas = {"text": 0, "tool_input": 0}

            def count(kind: str, delta: str, deltas: dict[str, int] = deltas) -> None:
                deltas[kind] += 1
                run.emit(
                    StreamEvent("text", text=delta)
                    if kind == "text"
                    else StreamEvent("tool_input", tool_input=delta)
                )

            on_delta = count

        # Each wait before a retry of this call (`call_model` retries), as an event on it.
        def waited(seconds: float, status: int | None, retry: int, node: Any = node) -> None:
            tree.add_event(
                node, "retry_wait", seconds=round(seconds, 3), status=status, attempt=retry
            )
            answer = f"answered {status}" if status is not None else "could not be reached"
            run.notify("retry_wait", f"The model API {answer}; retry {retry} in {seconds:.3g} s")

        try:
            # Positional: a call with keywords costs more, on every model turn.
            message = await call_model(run.client, params, on_delta, max_wait, waited, beta)
        except asyncio.CancelledError:
            tree.end_node(node, NodeStatus.CANCELLED)
            raise
        except TypeError as exc:
            if "authentication" not in str(exc):
                failed = api_error(exc, model)  # typed, like every other failed call
                tree.end_node(node, NodeStatus.FAILED, error=failed)
                raise failed from exc
            # The SDK only notices a missing key when the request is built.
            missing = ConfigurationError(
                f"agent {run.agent.name!r} has no API key: set ANTHROPIC_API_KEY, or pass "
                "client=... (offline: groundswell.testing.FakeAnthropicAPI().client(); in a "
                "test: the fake_agents fixture, groundswell.testing.use_fake() or "
                "agent.override(client=...))"
            )
            tree.end_node(node, NodeStatus.FAILED, error=missing)
            raise missing from exc
        except Exception as exc:  # SDK, transport or anything else: a typed error, a closed node
            error = api_error(exc, model)
            tree.end_node(node, NodeStatus.FAILED, error=error)
            if is_retryable_stream_error(exc) and attempt <= MID_STREAM_RETRIES:
                tree.add_event(parent, "stream_retry", attempt=attempt, error=str(error))
                # Deltas already sent for this turn are void; say so before resending.
                run.emit(StreamEvent("retry", text=str(error)))
                continue
            if error is exc:  # typed already (a wait too long), its cause the SDK's error
                raise
            raise error from exc
        except BaseException as exc:  # Ctrl-C, a closed generator: the call ends with the turn
            tree.end_node_after(node, exc)
            raise
        content = reply_blocks(message)  # the SDK builds its Message without checking it
        if isinstance(content, str):
            error = malformed(content)
            tree.end_node(node, NodeStatus.FAILED, error=error)
            raise error
        reported = message.usage
        turn_usage = _turn_usage(reported, usage)
        metrics = own_metrics(node)
        metrics["usage"] = turn_usage
        # Priced now if a dollar budget counts it (or it wrote to the cache), else when read;
        # the context is read only while some dollar budget exists at all.
        if turn_usage and (
            (LIVE_SPENDS and SPEND.get() is not None)
            or turn_usage.get("cache_creation_input_tokens")
        ):
            charge(node, model, turn_usage, reported)
        metrics["attempt"] = attempt
        texts: list[str] = []
        tool_calls: list[Any] = []
        # The blocks as recorded: `jsonable` of each, but a plain text block's only
        # content is its text (its two keys and "text" are shorter than any secret).
        recorded: list[Any] = []
        scrubbed: str | None = None  # the last plain text block's text, as recorded
        for b in content:
            kind = b["type"]
            if kind == "text":
                texts.append(b["text"])
                if len(b) == 2:
                    scrubbed = jsonable_text(b["text"])
                    recorded.append({"type": "text", "text": scrubbed})
                    continue
            elif kind == "tool_use":
                tool_calls.append(b["name"])
            recorded.append(jsonable(b, 2))  # as deep as inside the response's content
        if len(texts) == 1:
            text = texts[0]
            # The one plain text block, whole in the preview: recorded already.
            if scrubbed is None or len(text) > _PREVIEW:
                scrubbed = jsonable_text(text[:_PREVIEW])
        else:
            text = "".join(texts)
            scrubbed = jsonable_text(text[:_PREVIEW])
        node.payload["response"] = {
            # The API's own ids and names: plain strings, nothing to scrub.
            "id": str(message.id),
            "model": str(message.model),
            "stop_reason": message.stop_reason,
            "text": scrubbed,
            "tool_calls": tool_calls,
            # The whole answer, so a saved run can be replayed offline
            # (groundswell.testing.FakeAnthropicAPI.from_trace); as the dicts
            # the conversation sends back, which cost less than model_dump.
            "content": recorded if len(content) <= _MAX_ITEMS else jsonable(content, 1),
        }
        if streaming:
            node.payload["stream"] = {
                "text_deltas": deltas["text"],
                "tool_input_deltas": deltas["tool_input"],
            }
        if message.stop_reason not in PLAIN:  # each stop reason's outcome: `replies`
            stopped_by = stopped(run, node, message, content, text)
            if stopped_by is not None:
                tree.end_node(node, NodeStatus.FAILED, error=stopped_by)
                raise stopped_by
        tree.end_node(node, NodeStatus.COMPLETED)
        return message, content, text


def _text_of(content: list[dict[str, Any]]) -> str:
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def _turn_usage(reported: Any, usage: dict[str, int]) -> dict[str, int]:
    """A reply's token counts (those that are whole numbers), also added to ``usage``.

    Written out field by field: it runs for every model turn, and a loop over the
    names costs more than the rest of the turn's bookkeeping.
    """
    # `reply_blocks` checked these two; the cache counts are optional in the SDK's
    # Usage (None when the API leaves them out).
    turn = {"input_tokens": reported.input_tokens, "output_tokens": reported.output_tokens}
    written = getattr(reported, "cache_creation_input_tokens", None)
    if isinstance(written, int):
        turn["cache_creation_input_tokens"] = written
    read = getattr(reported, "cache_read_input_tokens", None)
    if isinstance(read, int):
        turn["cache_read_input_tokens"] = read
    if usage:
        for name, value in turn.items():
            usage[name] = usage.get(name, 0) + value
    else:  # the first turn of the attempt
        usage.update(turn)
    return turn
