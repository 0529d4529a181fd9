"""Every request field of the installed SDK reaches the API as it was set.

The set of fields is read from the SDK's own ``MessageCreateParams`` (and the
beta twin), and each field's sample value is made from the SDK's type for it,
so a field a newer SDK adds is walked too, with no change here.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import pytest
from anthropic.types import message_create_params as standard
from anthropic.types.beta import message_create_params as beta
from pydantic import BaseModel

from groundswell import Agent, ConfigurationError, Prompt, PromptOverrides
from groundswell.testing import FakeAnthropicAPI, text

# Groundswell builds these itself (the conversation, and streaming per call).
BUILT = {"messages", "stream"}
# Set on every agent anyway: the walk gives them other values.
VALUES: dict[str, Any] = {
    "model": "claude-haiku-4-5",
    "max_tokens": 77,
    "system": "Be brief.",
    # The SDK's lower bound on thinking budgets is documented, not typed.
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tools": [{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}],
}


def _fields() -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for params in (beta.MessageCreateParamsBase, standard.MessageCreateParamsBase):
        hints.update(typing.get_type_hints(params))
    return {name: hint for name, hint in sorted(hints.items()) if name not in BUILT}


def sample(hint: Any, depth: int = 0) -> Any:
    """A value the SDK's type ``hint`` accepts (the first choice of every union)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Required, typing.NotRequired, typing.Annotated):
        return sample(args[0], depth)
    if origin is typing.Union:
        options = [a for a in args if a is not type(None)]
        return sample(options[0], depth)
    if origin is Literal:
        return args[0]
    if origin in (Iterable, list, Sequence):
        return [sample(args[0], depth + 1)]
    if origin in (dict, Mapping):
        return {"k": "v"}
    if isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__"):
        inner = typing.get_type_hints(hint, include_extras=True)
        return {
            key: sample(inner[key], depth + 1)
            for key in sorted(inner)
            if _required(hint, inner[key]) or (depth == 0 and len(inner) <= 3)
        }
    samples = {str: "s-1", bool: True, int: 1, float: 0.5}
    if hint in samples:
        return samples[hint]
    if hint is object or hint is Any:
        return {}
    raise AssertionError(f"no sample for {hint!r}")


def _required(typed_dict: Any, annotation: Any) -> bool:
    # Read from the annotation: with postponed annotations, __required_keys__
    # cannot see Required[...] on Python 3.11.
    origin = typing.get_origin(annotation)
    if origin is typing.Required:
        return True
    if origin is typing.NotRequired:
        return False
    return bool(typed_dict.__total__)


FIELDS = _fields()


def _value(name: str) -> Any:
    return VALUES.get(name, sample(FIELDS[name]))


def _arrived(request: Any, name: str) -> Any:
    """The value of ``name`` as the fake received it: in the body, else in its header."""
    if name in request.body:
        return request.body[name]
    headers = request.headers
    for header in (f"anthropic-{name.replace('_', '-')}", f"anthropic-{name[:-1]}"):
        if header in headers:
            value = headers[header]
            return value.split(",") if name == "betas" else value
    raise AssertionError(f"{name} reached neither the body nor a header: {request.body}")


def _where(request: Any, name: str, value: Any) -> Any:
    got = _arrived(request, name)
    if name == "tools":
        return [{k: t[k] for k in ("name", "description", "input_schema")} for t in got]
    if name == "mcp_servers":
        return [{k: s[k] for k in value[0]} for s in got]
    return got


def test_the_walk_covers_the_installed_sdk() -> None:
    assert {"cache_control", "output_config", "inference_geo", "context_management"} <= set(FIELDS)
    assert len(FIELDS) >= 20


@pytest.mark.parametrize("where", ["agent", "prompt", "overrides"])
@pytest.mark.parametrize("name", sorted(FIELDS))
async def test_each_field_reaches_the_request_unchanged(name: str, where: str) -> None:
    fake = FakeAnthropicAPI([text("ok")])
    value = _value(name)
    if where == "agent":
        agent = Agent(client=fake.client(), **{name: value})
        await agent.prompt("hi")
    elif where == "prompt":
        agent = Agent(client=fake.client())
        await agent.prompt(Prompt(user="hi", **{name: value}))
    else:
        agent = Agent(client=fake.client())
        await agent.prompt("hi", PromptOverrides(**{name: value}))
    (request,) = fake.requests
    assert _where(request, name, value) == value


class Verdict(BaseModel):
    approve: bool


async def test_effort_and_response_format_both_arrive() -> None:
    fake = FakeAnthropicAPI([text('{"approve": true}')])
    agent = Agent(client=fake.client(), effort="low")
    result = await agent.prompt(Prompt(user="Judge", response_format=Verdict))
    assert result == Verdict(approve=True)
    config = fake.requests[0].body["output_config"]
    assert config["effort"] == "low"
    assert config["format"]["type"] == "json_schema"
    assert config["format"]["schema"]["properties"]["approve"]["type"] == "boolean"


async def test_output_config_merges_instead_of_being_replaced() -> None:
    fake = FakeAnthropicAPI([text('{"approve": false}')])
    agent = Agent(client=fake.client(), output_config={"effort": "medium"})
    await agent.prompt(Prompt(user="Judge", response_format=Verdict))
    config = fake.requests[0].body["output_config"]
    assert config["effort"] == "medium" and "format" in config


async def test_precedence_overrides_then_prompt_then_agent() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c")])
    agent = Agent(client=fake.client(), effort="low", inference_geo="us")
    await agent.prompt("one")
    await agent.prompt(Prompt(user="two", effort="high"))
    await agent.prompt(Prompt(user="three", effort="high"), PromptOverrides(effort="max"))
    efforts = [r.body["output_config"]["effort"] for r in fake.requests]
    assert efforts == ["low", "high", "max"]
    assert {r.body["inference_geo"] for r in fake.requests} == {"us"}


async def test_a_beta_only_field_goes_through_the_beta_namespace() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    agent = Agent(client=fake.client(), context_management={"edits": []})
    await agent.prompt("hi")
    assert fake.requests[0].body["context_management"] == {"edits": []}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"effort": "extreme"}, "effort='extreme'"),
        ({"speed": "warp"}, "speed='warp'"),
        ({"cache_control": {"type": "forever"}}, "cache_control="),
        ({"inference_geo": 7}, "inference_geo=7"),
        ({"prompt_cache": "2h"}, "prompt_cache='2h'"),
        ({"prompt_cache": ["system", "footer"]}, "unknown place(s) ['footer']"),
        ({"max_retry_wait": -1}, "max_retry_wait must be a number of seconds"),
        ({"continue_on_max_tokens": "yes"}, "continue_on_max_tokens must be True or False"),
    ],
)
def test_a_bad_value_is_refused_where_it_is_set(settings: dict[str, Any], named: str) -> None:
    for build in (
        lambda: Agent(**settings),
        lambda: Prompt(user="x", **settings),
        lambda: PromptOverrides(**settings),
    ):
        with pytest.raises(ConfigurationError) as caught:
            build()
        assert named in str(caught.value)


def test_a_misspelt_field_is_refused_with_the_close_names() -> None:
    for build in (
        lambda: Agent(inference_geoo="us"),
        lambda: Prompt(user="x", inference_geoo="us"),
        lambda: PromptOverrides(inference_geoo="us"),
    ):
        with pytest.raises(ConfigurationError, match="inference_geo"):
            build()


async def test_a_field_of_a_newer_sdk_is_taken_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fields with no keyword of their own (speed, here) go by name on all three.
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = Agent(client=fake.client(), speed="fast")
    await agent.prompt(Prompt(user="x"), PromptOverrides(speed="standard"))
    await agent.prompt(Prompt(user="y", speed="standard"))
    assert [r.body["speed"] for r in fake.requests] == ["standard", "standard"]
    assert Prompt(user="y", speed="fast").request_fields == {"speed": "fast"}


async def test_an_unknown_extra_body_key_is_sent_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeAnthropicAPI([text("a"), text("b")])
    with caplog.at_level(logging.WARNING, logger="groundswell"):
        agent = Agent(client=fake.client(), extra_body={"brand_new_field": 1})
        Agent(client=fake.client(), extra_body={"brand_new_field": 2})
    await agent.prompt("x")
    assert fake.requests[0].body["brand_new_field"] == 1
    warned = [r for r in caplog.records if "brand_new_field" in r.getMessage()]
    assert len(warned) == 1
    assert "unchecked" in warned[0].getMessage()


def test_a_known_field_smuggled_in_extra_body_gets_told_its_keyword(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="groundswell"):
        Agent(extra_body={"inference_geo": "eu"})
    assert any("pass it as inference_geo=" in r.getMessage() for r in caplog.records)


def test_prompt_repr_shows_what_is_set() -> None:
    assert repr(Prompt(user="x", effort="low")) == "Prompt(user='x', effort='low')"


async def test_output_config_effort_at_a_higher_level_wins_over_a_lower_levels_effort() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c")])
    agent = Agent(client=fake.client(), effort="low")
    await agent.prompt("x", PromptOverrides(output_config={"effort": "high"}))
    await agent.prompt(Prompt(user="y", output_config={"effort": "max"}))
    # The same level's shorthand wins over its own output_config.
    await agent.prompt(Prompt(user="z", output_config={"effort": "max"}, effort="medium"))
    assert [r.body["output_config"]["effort"] for r in fake.requests] == ["high", "max", "medium"]


def test_with_takes_the_sdks_fields_as_the_constructor_does() -> None:
    prompt = Prompt(user="x", speed="fast").with_(speed="standard", inference_geo="eu")
    assert prompt.request_fields == {"speed": "standard"}
    assert prompt.inference_geo == "eu"


async def test_a_credential_field_is_redacted_and_kept_out_of_cache_keys() -> None:
    from groundswell.cache.backends import request_cache_key

    token = "fct-7f3a9c2e41d84b6aa0c1"
    overrides = PromptOverrides(fallback_credit_token=token)
    prompt = Prompt(user="x", fallback_credit_token=token)
    assert token not in repr(overrides) and token not in repr(prompt)
    fake = FakeAnthropicAPI([text("ok")])
    result = await Agent(client=fake.client()).run("hi", overrides)
    assert fake.requests[0].body["fallback_credit_token"] == token  # still sent
    assert token not in result.tree.to_json()
    params = {"model": "m", "max_tokens": 1, "messages": [], "fallback_credit_token": token}
    assert request_cache_key("a", params) == request_cache_key(
        "a", {**params, "fallback_credit_token": "another-credit-token-99"}
    )
