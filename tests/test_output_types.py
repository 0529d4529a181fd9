"""``response_format`` of any type pydantic's TypeAdapter takes, end to end on the fake API."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import pickle
import re
import typing
from typing import Annotated, Any, Literal

import anthropic
import pytest
from groundswell_lru import LRUCache
from pydantic import BaseModel, Field, RootModel
from typing_extensions import TypedDict

from groundswell import (
    Agent,
    ConfigurationError,
    Extract,
    Prompt,
    ReflectionConfig,
    ResponseValidationError,
    WorkflowContext,
    workflow,
)
from groundswell.model.output_types import OutputType, output_type, parse_output, type_name
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, json_reply, text


class Quote(BaseModel):
    text: str
    author: str


class Verdict(BaseModel):
    approve: bool
    reason: str


class Mood(enum.StrEnum):
    CALM = "calm"
    STORMY = "stormy"


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Span:
    start: int
    end: int


class Tags(RootModel[list[str]]):
    pass


class Node(BaseModel):
    name: str
    children: list[Node] = []


WRAPPED = "result"

# (type, what the model answers inside the wrapper or as the object, the value expected)
CASES: list[tuple[Any, Any, Any]] = [
    (int, 3, 3),
    (bool, False, False),
    (str, "hello", "hello"),
    (Mood, "stormy", Mood.STORMY),
    (Literal["yes", "no"], "no", "no"),
    (list[str], ["a", "b"], ["a", "b"]),
    (
        list[Quote],
        [{"text": "Flow.", "author": "Lao"}],
        [Quote(text="Flow.", author="Lao")],
    ),
    (Quote | Span, {"start": 1, "end": 2}, Span(1, 2)),
    (int | None, None, None),
    (Tags, ["x"], Tags(["x"])),
]
OBJECTS: list[tuple[Any, Any, Any]] = [
    (Verdict, {"approve": True, "reason": "ok"}, Verdict(approve=True, reason="ok")),
    (Point, {"x": 1, "y": 2}, {"x": 1, "y": 2}),
    (Span, {"start": 0, "end": 4}, Span(0, 4)),
]


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "typed")
    return Agent(client=fake.client(max_retries=0), **kw)


def ids(case: tuple[Any, Any, Any]) -> str:
    return type_name(case[0])


# -- the schema sent and the value returned -----------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
async def test_a_non_object_type_is_wrapped_and_unwrapped(case: tuple[Any, Any, Any]) -> None:
    fmt, answer, expected = case
    fake = FakeAnthropicAPI([json_reply({WRAPPED: answer})])
    output = await agent_for(fake).prompt(Prompt(user="q", response_format=fmt))
    assert output == expected and type(output) is type(expected)
    schema = fake.requests[0].output_schema
    assert schema is not None
    assert schema["type"] == "object" and schema["required"] == [WRAPPED]
    assert schema["additionalProperties"] is False and list(schema["properties"]) == [WRAPPED]
    sent = schema["properties"][WRAPPED]
    if "$ref" in sent:  # a named type (an Enum, a RootModel) is a definition
        sent = schema["$defs"][sent["$ref"].rsplit("/", 1)[-1]]
    own = output_type(fmt).value.json_schema()
    own.pop("$defs", None)
    # The wrapped value's schema is the type's own, made strict like the rest.
    assert sent == anthropic.transform_schema(own)


@pytest.mark.parametrize("case", OBJECTS, ids=ids)
async def test_an_object_type_is_sent_as_it_is(case: tuple[Any, Any, Any]) -> None:
    fmt, answer, expected = case
    fake = FakeAnthropicAPI([json_reply(answer)])
    output = await agent_for(fake).prompt(Prompt(user="q", response_format=fmt))
    assert output == expected and type(output) is type(expected)
    schema = fake.requests[0].output_schema
    assert schema is not None and schema["type"] == "object"
    assert WRAPPED not in schema["properties"] and schema["additionalProperties"] is False
    assert not output_type(fmt).wrapped


def test_a_model_schema_is_what_the_sdk_makes_of_it() -> None:
    for model in (Verdict, Quote, Node):  # Node: recursive, a top-level $ref
        assert output_type(model).schema == anthropic.transform_schema(model)
        assert not output_type(model).wrapped


def test_every_object_in_a_strict_schema_is_closed() -> None:
    def objects(schema: Any) -> list[dict[str, Any]]:
        if isinstance(schema, dict):
            found = [schema] if schema.get("type") == "object" else []
            return found + [o for v in schema.values() for o in objects(v)]
        if isinstance(schema, list):
            return [o for v in schema for o in objects(v)]
        return []

    for fmt, _, _ in CASES + OBJECTS:
        found = objects(output_type(fmt).schema)
        assert found and all(o["additionalProperties"] is False for o in found), fmt


async def test_a_bare_value_without_the_wrapper_is_accepted_too() -> None:
    fake = FakeAnthropicAPI([json_reply(["a", "b"]), text('```json\n{"result": 7}\n```')])
    agent = agent_for(fake)
    assert await agent.prompt(Prompt(user="q", response_format=list[str])) == ["a", "b"]
    assert await agent.prompt(Prompt(user="q", response_format=int)) == 7


async def test_a_reply_that_does_not_fit_names_the_type() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: [{"text": "no author"}]})])
    with pytest.raises(ResponseValidationError, match=r"does not fit list\[Quote\]") as caught:
        await agent_for(fake).prompt(Prompt(user="q", response_format=list[Quote]))
    assert caught.value.raw == json.dumps({WRAPPED: [{"text": "no author"}]})
    assert caught.value.errors[0]["loc"] == [WRAPPED, 0, "author"]
    with pytest.raises(ResponseValidationError, match=r"does not fit Literal\['yes', 'no'\]"):
        parse_output('{"result": "maybe"}', Literal["yes", "no"])


@pytest.mark.parametrize("case", CASES + OBJECTS, ids=ids)
async def test_the_schema_aware_fake_answers_every_type(case: tuple[Any, Any, Any]) -> None:
    fmt = case[0]
    result = await agent_for(FakeAnthropicAPI()).run(Prompt(user="q", response_format=fmt))
    assert output_type(fmt).value.validate_python(result.output) == result.output


async def test_the_tree_records_a_readable_name_of_the_type() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: []})])
    result = await agent_for(fake).run(Prompt(user="q", response_format=list[Quote]))
    assert result.node.payload["response_format"] == "list[Quote]"
    assert result.node.payload["output"] == []


def test_readable_names() -> None:
    assert type_name(Verdict) == "Verdict"
    assert type_name(list[Quote]) == "list[Quote]"
    assert type_name(dict[str, list[int]]) == "dict[str, list[int]]"
    assert type_name(Literal["a", 1]) == "Literal['a', 1]"
    assert type_name(Quote | Span | None) == "Quote | Span | None"
    assert type_name(typing.Optional[int]) == "int | None"  # noqa: UP045
    assert type_name(Annotated[int, Field(ge=0)]) == "int"
    assert type_name(tuple[int, ...]) == "tuple[int, ...]"


# -- typing ---------------------------------------------------------------------------


async def test_the_output_is_typed_by_the_response_format() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: ["a"]}), json_reply({WRAPPED: "no"})])
    agent = agent_for(fake)
    words = await agent.prompt(Prompt(user="q", response_format=list[str]))
    typing.assert_type(words, list[str])
    answer = await agent.prompt(Prompt(user="q", response_format=Literal["yes", "no"]))
    typing.assert_type(answer, Any)  # a Literal is no type[T] to a type checker
    typing.assert_type(Prompt(user="q"), Prompt[str])
    typing.assert_type(Prompt(user="q", response_format=Verdict), Prompt[Verdict])


# -- the layers: cache, streaming, reflection, extraction ------------------------------


async def test_answers_of_any_type_come_back_from_the_cache_as_that_type() -> None:
    fake = FakeAnthropicAPI(
        [
            json_reply({WRAPPED: [{"text": "Flow.", "author": "Lao"}]}),
            json_reply({WRAPPED: "stormy"}),
            json_reply({"start": 1, "end": 3}),
        ]
    )
    agent = agent_for(fake, cache=LRUCache())
    for fmt in (list[Quote], Mood, Span):
        prompt = Prompt(user="q", response_format=fmt)
        first = await agent.run(prompt)
        second = await agent.run(prompt)
        assert second.node.metrics["cache"] == "hit", fmt
        assert second.output == first.output and type(second.output) is type(first.output)
    assert (await agent.prompt(Prompt(user="q", response_format=list[Quote])))[0].author == "Lao"
    assert len(fake.requests) == 3  # one per type: each schema is its own key


async def test_streaming_ends_with_the_validated_value() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: [{"text": "Flow.", "author": "Lao"}]})])
    events = [
        e async for e in agent_for(fake).stream(Prompt(user="q", response_format=list[Quote]))
    ]
    assert "".join(e.text or "" for e in events if e.type == "text").startswith('{"result"')
    assert events[-1].type == "result" and events[-1].result == [Quote(text="Flow.", author="Lao")]


async def test_reflection_retries_a_reply_that_does_not_fit() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: "seven"}), json_reply({WRAPPED: 7})])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="feedback"))
    assert await agent.prompt(Prompt(user="How many?", response_format=int)) == 7
    feedback = fake.requests[1].last_user_text()
    assert "does not fit int" in feedback
    assert 'an object whose "result" is int' in feedback


async def test_the_llm_critic_sees_the_schema_of_any_output_type() -> None:
    critique = {"analysis": "a word, not a number", "should_retry": True, "guidance": "Digits."}
    fake = FakeAnthropicAPI(
        [json_reply({WRAPPED: "seven"}), json_reply(critique), json_reply({WRAPPED: 7})]
    )
    agent = agent_for(fake, enable_reflection=True)
    assert await agent.prompt(Prompt(user="How many?", response_format=int)) == 7
    critic = fake.requests[1].last_user_text()
    assert "required_output_schema" in critic and '\\"result\\"' in critic  # the wrapped schema


async def test_extraction_searches_the_answer_as_json_or_as_the_string() -> None:
    fake = FakeAnthropicAPI(
        [json_reply({WRAPPED: ["see CI-42", "x"]}), json_reply({WRAPPED: "stormy"})]
    )
    agent = agent_for(fake, cache=LRUCache())
    seen: dict[str, Any] = {}

    @workflow(name="extracting")
    async def extracting(ctx: WorkflowContext) -> None:
        listed = Prompt(user="q", response_format=list[str], extract=Extract(r'\["(.*?)"', "first"))
        await agent.run(listed)
        cached = await agent.run(listed)  # from the cache: extracted the same way
        mood = Prompt(user="m", response_format=Mood, extract=Extract(r"^\w+$", "mood"))
        seen.update(cached.extracted, **(await agent.run(mood)).extracted)
        seen["state"] = dict(ctx.state)

    await extracting.run()
    assert seen["first"] == "see CI-42" and seen["mood"] == "stormy"
    assert seen["state"] == {"first": "see CI-42", "mood": "stormy"}


# -- refused when the Prompt is built ---------------------------------------------------


def make_verdict() -> Verdict:
    return Verdict(approve=True, reason="")


class Plain:
    pass


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        (make_verdict, "got the function 'make_verdict'"),
        (Verdict(approve=True, reason=""), "got a Verdict instance"),
        ("list[str]", r"got the string 'list\[str\]'"),
        (5, "got int 5"),
        (Plain, "Plain is not a type pydantic can validate"),
        (dict, "dict is an open mapping"),
        (dict[str, int], r"dict\[str, int\] is an open mapping"),
        (Any, "Any leaves the JSON type open at the answer itself"),
        (list[Any], r"list\[Any\] leaves the JSON type open at the answer's items"),
        (list[dict[str, Any]], r"has an open mapping \(a dict\) at the answer's items"),
        (dict[str, int] | None, r"has an open mapping \(a dict\) at the answer itself"),
        (tuple[int, str], r"tuple\[int, str\] has a fixed-length tuple at the answer itself"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_is_no_output_type_is_refused_when_the_prompt_is_built(fmt: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^Prompt\.response_format .*{message}"):
        Prompt(user="q", response_format=fmt)


def test_a_model_with_an_open_field_is_refused_with_its_place() -> None:
    class Loose(BaseModel):
        name: str
        extra: Any

    with pytest.raises(ConfigurationError, match=r"Loose leaves the JSON type open at extra"):
        Prompt(user="q", response_format=Loose)


class Inner(BaseModel):
    tags: dict[str, int]


class Outer(BaseModel):
    inner: Inner


class Listed(BaseModel):
    rows: list[dict[str, str]]


class Pair(BaseModel):
    pair: tuple[int, str]


@pytest.mark.parametrize(
    ("fmt", "where"),
    [(Outer, "Inner.tags"), (Listed, r"rows\[\]"), (list[Listed], r"Listed\.rows\[\]")],
    ids=["nested-model", "list-field", "in-a-list"],
)
def test_an_open_mapping_anywhere_is_refused_with_its_place_and_the_fix(
    fmt: Any, where: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Prompt(user="q", response_format=fmt)
    message = str(caught.value)
    assert re.search(rf"has an open mapping \(a dict\) at {where}:", message), message
    assert "could only answer {} there" in message
    assert "named fields" in message and "list of key/value models" in message


def test_a_fixed_length_tuple_is_refused_and_a_homogeneous_one_is_a_list() -> None:
    with pytest.raises(ConfigurationError, match=r"Pair has a fixed-length tuple at pair: .*named"):
        Prompt(user="q", response_format=Pair)
    schema = output_type(tuple[int, ...]).schema["properties"][WRAPPED]
    assert schema == {"type": "array", "items": {"type": "integer"}}


async def test_a_homogeneous_tuple_comes_back_as_a_tuple() -> None:
    fake = FakeAnthropicAPI([json_reply({WRAPPED: [1, 2, 3]})])
    output = await agent_for(fake).prompt(Prompt(user="q", response_format=tuple[int, ...]))
    assert output == (1, 2, 3)


# -- made once per type -----------------------------------------------------------------


def test_the_output_type_is_made_once_per_type() -> None:
    first = Prompt(user="a", response_format=list[Quote]).output_type
    assert isinstance(first, OutputType)
    assert Prompt(user="b", response_format=list[Quote]).output_type is first
    assert first.schema is first.schema  # made strict once
    assert Prompt(user="c").output_type is None
    # An unhashable type form is kept by identity.
    odd = Annotated[int, {"unit": "apples"}]
    assert output_type(odd) is output_type(odd) and output_type(odd).wrapped


def test_requests_are_answered_from_the_wrapped_schema() -> None:
    schema = output_type(list[Quote]).schema
    request = MessagesRequest(
        "/v1/messages",
        {},
        {"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    assert request.output_schema == schema


def test_a_prompt_copies_and_pickles_with_its_output_type() -> None:
    prompt = Prompt(user="q", response_format=list[Quote])
    for copied in (copy.deepcopy(prompt), pickle.loads(pickle.dumps(prompt))):
        assert copied == prompt and copied.output_type is prompt.output_type
