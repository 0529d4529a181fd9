"""Checking agent settings where they are given: `Agent`, `Prompt` and `PromptOverrides`.

The Messages API request fields are checked against the SDK's own request
types, ``anthropic.types.MessageCreateParams`` and its beta twin (a value
either namespace accepts passes: the agent sends ``betas`` and remote MCP
requests through the beta one), by pydantic in strict mode; when both refuse
it, the one whose type it is closer to tells why. A value the SDK's
types refuse fails when the agent or override is built, with a
`ConfigurationError` naming the field and the fix, instead of reaching the
API; a new SDK version brings its own types, so there is no list of values to
keep here, nor of fields (`groundswell.model.request_fields`). The bounds below are
the ones the SDK documents on those fields.

The sampling fields the SDK no longer names (``temperature``, ``top_p``,
``top_k``, sent in ``extra_body``) and Groundswell's own fields are checked
by hand. ``anthropic`` is imported only when a field is checked.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..scrubbing.scrubber import is_secret_field, register_secret
from .request_fields import check_extra_body, sdk_fields

__all__ = [
    "check_api_field",
    "check_api_item",
    "check_effort",
    "check_flag",
    "check_mapping",
    "check_mcp_servers",
    "check_positive_int",
    "check_prompt_cache",
    "check_sampling",
    "check_seconds",
    "check_settings",
]

# Lower bounds the SDK's docstrings state ("Set to `0` to populate the prompt
# cache"; thinking "budget_tokens ... Must be ≥1024"): its types cannot say them.
_MINIMUM: dict[tuple[str, str | None], int] = {
    ("max_tokens", None): 0,
    ("thinking", "budget_tokens"): 1024,
}
# What to write instead, by field (the types say what is wrong, these say how to fix it).
_FIX = {
    "model": "pass a model name such as 'claude-sonnet-4-6'",
    "system": "pass a string, or a list of text blocks {'type': 'text', 'text': ...}",
    "tool_choice": "pass {'type': 'auto'}, {'type': 'any'}, {'type': 'none'} or "
    "{'type': 'tool', 'name': ...}",
    "max_tokens": "pass an int >= 0 (0 only warms the prompt cache)",
    "stop_sequences": "pass a list of strings, e.g. ['END']",
    "metadata": "pass a dict such as {'user_id': '...'}",
    "thinking": "pass {'type': 'enabled', 'budget_tokens': 2048} (at least 1024), "
    "{'type': 'adaptive'} or {'type': 'disabled'}",
    "betas": "pass a list of beta names the SDK knows, e.g. ['files-api-2025-04-14']",
    "container": "pass a container id (str) or {'id': ..., 'skills': [...]}",
    "service_tier": "pass 'auto' or 'standard_only'",
    "tools": "pass an Anthropic tool dict such as {'name': ..., 'description': ..., "
    "'input_schema': {'type': 'object', ...}}, or a server tool dict with its 'type'",
    "tools.mcp_toolset": "an mcp_toolset is {'type': 'mcp_toolset', 'mcp_server_name': ..., "
    "'default_config': {'enabled': bool, 'defer_loading': bool}, 'configs': {<tool name>: "
    "{'enabled': bool, 'defer_loading': bool}}}, for a remote server of that name in mcps",
    "mcp_servers": "a remote MCP server is {'type': 'url', 'name': ..., 'url': ...}",
    "container.skills": "an API skill is {'type': 'anthropic' or 'custom', 'skill_id': ..., "
    "'version': ...}",
}
# temperature, top_p, top_k: (lowest, highest, int only), as the API reference gives them.
_SAMPLING: dict[str, tuple[float, float | None, bool]] = {
    "temperature": (0.0, 1.0, False),
    "top_p": (0.0, 1.0, False),
    "top_k": (0, None, True),
}


def _concrete(annotation: Any) -> Any:
    """``annotation`` with its top-level ``Iterable[X]`` and ``List[X]`` made ``Sequence[X]``.

    pydantic validates an ``Iterable`` lazily, when it is iterated (`_drain`
    does that for nested ones); at the top a ``Sequence`` gives errors their
    index, and a tuple is as good as a list here (Groundswell sends a list).
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Iterable, list) and args:
        return Sequence[args[0]]  # type: ignore[valid-type]
    if origin is typing.Union:
        return typing.Union[tuple(_concrete(a) for a in args)]  # noqa: UP007
    return annotation


def _request_types() -> tuple[tuple[str, Any], ...]:
    """The SDK's request types: the standard namespace's, then the beta one's."""
    from anthropic.types import message_create_params as std
    from anthropic.types.beta import message_create_params as beta

    return (
        ("anthropic.types.MessageCreateParams", std.MessageCreateParamsNonStreaming),
        ("anthropic.types.beta.MessageCreateParams", beta.MessageCreateParamsNonStreaming),
    )


def _options(annotation: Any) -> list[Any]:
    """The members of a union (``Optional`` included), else the annotation itself."""
    if typing.get_origin(annotation) is typing.Union:
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation] if annotation is not None else []


def _items_of(annotation: Any) -> list[Any]:
    """The item types of the sequence types among ``annotation``'s options."""
    return [
        typing.get_args(option)[0]
        for option in _options(annotation)
        if typing.get_origin(option) in (Iterable, Sequence, list) and typing.get_args(option)
    ]


@functools.cache
def _adapters(field: str, part: str | None = None) -> tuple[tuple[str, Any, bool], ...]:
    """(type name, pydantic TypeAdapter, is a union) triples that say what the SDK accepts.

    ``part`` is ``None`` (the field itself), ``"item"`` (one item of a list
    field, e.g. one tool) or ``"<key>.item"`` (one item of a list under a key
    of a dict field: ``container``'s ``skills``).
    """
    from pydantic import TypeAdapter

    found: list[tuple[str, Any, bool]] = []
    for label, params in _request_types():
        hint = typing.get_type_hints(params).get(field)
        if hint is None:
            continue
        name = f"{label}[{field!r}]"
        if part is None:
            found.append((name, TypeAdapter(_concrete(hint)), _is_union(hint)))
            continue
        key, _, _ = part.rpartition(".")
        holders = [hint]
        if key:
            holders = [
                typing.get_type_hints(option)[key]
                for option in _options(hint)
                if hasattr(option, "__required_keys__") and key in typing.get_type_hints(option)
            ]
            name += f"[{key!r}]"
        for holder in holders:
            for item in _items_of(holder):
                found.append((f"{name} items", TypeAdapter(item), _is_union(item)))
    return tuple(found)


def _drain(value: Any) -> None:
    """Iterate every lazily validated ``Iterable`` in ``value``, so its items are checked too."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, Iterator):
            stack.extend(list(item))


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) is typing.Union


def _refusal(adapters: Sequence[tuple[str, Any, bool]], value: Any) -> tuple[str, str] | None:
    """``None`` when one of the adapters accepts ``value``; else (type name, what is wrong).

    When every adapter refuses it, the closest refusal is told (the first
    adapter's on a tie): a value meant for the beta namespace (an
    ``mcp_toolset`` tool) is judged by the beta type, not by every member
    of the standard one.
    """
    from pydantic import ValidationError

    best: tuple[tuple[int, int], str, list[Any]] | None = None
    for label, adapter, union in adapters:
        try:
            _drain(adapter.validate_python(value, strict=True))
        except ValidationError as exc:
            score, errors = _closest(exc.errors(include_url=False), value, union)
            if best is None or score < best[0]:
                best = (score, label, errors)
        else:
            return None
    return None if best is None else (best[1], _summary(best[2]))


def _closest(errors: list[Any], value: Any, union: bool) -> tuple[tuple[int, int], list[Any]]:
    """The errors of the union member ``value`` is closest to, and how close (lower is closer).

    pydantic reports a dict refused by a union once per member, each error's
    location starting with the member's name. The closest member is one whose
    ``type`` tag the dict matches (no error on its ``type``), with the fewest
    errors; when no member's tag matches, every error is told.
    """
    if not union or not isinstance(value, Mapping):
        return (0, len(errors)), errors
    members: dict[Any, list[Any]] = {}
    for error in errors:
        if error["loc"]:
            members.setdefault(error["loc"][0], []).append(error)
    tagged = [
        found
        for found in members.values()
        if not any(tuple(e["loc"][1:]) == ("type",) for e in found)
    ]
    if not tagged:
        return (1, len(errors)), errors
    closest = min(tagged, key=len)
    return (0, len(closest)), closest


def _summary(errors: list[Any]) -> str:
    """The first few problems pydantic found, one short phrase each."""
    seen: list[str] = []
    for error in errors:
        # A location also names the union member tried ("ToolParam", "str",
        # "literal[...]"); keep only the keys and indexes of the value itself.
        loc = ".".join(str(p) for p in error["loc"] if _is_key(p))
        message = str(error["msg"])
        message = message if len(message) <= 100 else message[:99] + "…"
        phrase = f"{loc}: {message}" if loc else message
        if phrase not in seen:
            seen.append(phrase)
    return "; ".join(seen[:3])


def _is_key(part: Any) -> bool:
    if isinstance(part, int):
        return True
    return bool(_KEY.fullmatch(str(part))) and part not in _TAGS


_KEY = re.compile(r"[a-z_][a-z0-9_]*")
_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "bytes"})


def _shown(value: Any) -> str:
    return f"{value!r:.60}"


def check_api_field(field: str, value: Any, owner: str) -> None:
    """Refuse ``value`` for the request field ``field`` when the SDK's types refuse it.

    ``None`` means "not set" and always passes. Raises `ConfigurationError`.
    """
    if value is None:
        return
    if field == "model" and isinstance(value, str) and not value.strip():
        raise ConfigurationError(
            f"{owner}: model must be a model name, got an empty string; {_FIX['model']}"
        )
    refused = _refusal(_adapters(field), value)
    if refused is not None:
        label, problem = refused
        raise ConfigurationError(
            f"{owner}: {field}={_shown(value)} is refused by the SDK's request type "
            f"{label} ({problem}); {_FIX.get(field, 'see that type')}"
        )
    for (name, key), lowest in _MINIMUM.items():
        if name != field:
            continue
        number = value if key is None else value.get(key) if isinstance(value, Mapping) else None
        if isinstance(number, int) and number < lowest:
            where = field if key is None else f"{field}[{key!r}]"
            raise ConfigurationError(
                f"{owner}: {where} must be at least {lowest}, got {number}; {_FIX[field]}"
            )


def check_api_item(
    field: str, item: Any, owner: str, where: str, *, show_value: bool = True
) -> None:
    """Check one item of a list field against the SDK's item type.

    ``field`` is ``"tools"`` (an Anthropic tool dict), ``"mcp_servers"`` (a
    remote MCP server) or ``"container.skills"`` (an API skill); ``where``
    names the item in the message (``"tools[2]"``); ``show_value=False``
    keeps the value out of it (one that may hold a token).
    """
    name, _, key = field.partition(".")
    refused = _refusal(_adapters(name, f"{key}.item" if key else "item"), item)
    if refused is not None:
        label, problem = refused
        shown = f"={_shown(item)}" if show_value else ""
        fix = _FIX[field]
        if field == "tools" and isinstance(item, Mapping) and item.get("type") == "mcp_toolset":
            fix = _FIX["tools.mcp_toolset"]
        raise ConfigurationError(
            f"{owner}: {where}{shown} is refused by the SDK's request type "
            f"{label} ({problem}); {fix}"
        )


def check_sampling(field: str, value: Any, owner: str) -> None:
    """``temperature``, ``top_p`` or ``top_k``: a number in the API's range, or ``None``."""
    if value is None:
        return
    lowest, highest, whole = _SAMPLING[field]
    kinds = int if whole else int | float
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or value < lowest
        or (highest is not None and value > highest)
    ):
        span = f"from {lowest} to {highest}" if highest is not None else f">= {lowest}"
        kind = "an int" if whole else "a number"
        raise ConfigurationError(f"{owner}: {field} must be {kind} {span}, got {_shown(value)}")


def check_positive_int(field: str, value: Any, owner: str) -> None:
    """``value`` must be an int >= 1 (``None``: not set)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{owner}: {field} must be a positive int, got {_shown(value)}; e.g. {field}=10"
        )


def check_flag(field: str, value: Any, owner: str) -> None:
    """``value`` must be True, False or ``None``."""
    if value is not None and not isinstance(value, bool):
        raise ConfigurationError(f"{owner}: {field} must be True or False, got {_shown(value)}")


def check_mapping(field: str, value: Any, owner: str, *, str_values: bool = False) -> None:
    """``value`` must be a dict with string keys (and string values with ``str_values``)."""
    if value is None:
        return
    what = "a dict of strings to strings" if str_values else "a dict with string keys"
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{owner}: {field} must be {what}, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or (str_values and not isinstance(item, str)):
            # The values may be secrets (env, headers): name the key only.
            raise ConfigurationError(
                f"{owner}: {field} must be {what}; the entry {key!r} holds a {type(item).__name__}"
            )


def check_settings(owner: str, settings: Mapping[str, Any]) -> None:
    """Check every request field and number ``settings`` holds (``None`` values are unset).

    Every field of the installed SDK's request types is checked against its
    type (`groundswell.model.request_fields`); ``tools`` are checked one by one
    elsewhere (they may be Groundswell tools).
    """
    fields: frozenset[str] | None = None  # read from the SDK only when something is set
    for field, value in settings.items():
        if value is None:
            continue
        if field in _SAMPLING:
            check_sampling(field, value, owner)
        elif field in _OWN_CHECKS:
            _OWN_CHECKS[field](field, value, owner)
        elif field == "extra_body":
            check_mapping(field, value, owner)
            check_extra_body(value)
        elif field == "mcp_servers":
            check_mcp_servers(value, owner)
        elif field != "tools":
            if fields is None:
                fields = sdk_fields()
            if field in fields:
                check_api_field(field, value, owner)
                if is_secret_field(field):  # fallback_credit_token: scrubbed wherever it goes
                    _register_strings(value)


def _register_strings(value: Any) -> None:
    if isinstance(value, str):
        register_secret(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _register_strings(item)


def check_effort(field: str, value: Any, owner: str) -> None:
    """``effort``: a level the SDK's ``output_config.effort`` takes (``None``: not set)."""
    if value is None:
        return
    refused = _refusal(_adapters("output_config"), {"effort": value})
    if refused is not None:
        label, problem = refused
        raise ConfigurationError(
            f"{owner}: effort={_shown(value)} is refused by the SDK's request type {label} "
            f"({problem}); pass one of the levels it names, e.g. effort='low'"
        )


def check_mcp_servers(value: Any, owner: str) -> None:
    """``mcp_servers``: a list of remote MCP server dicts, each as the SDK's type takes it."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"{owner}: mcp_servers must be a list of remote MCP servers, got "
            f"{type(value).__name__}; {_FIX['mcp_servers']} (or use mcps=[...])"
        )
    for item in value:
        # Before anything can echo it: the token goes to every scrubber (logs included).
        if isinstance(item, Mapping) and item.get("authorization_token"):
            register_secret(str(item["authorization_token"]))
    for i, item in enumerate(value):
        # show_value=False: a remote server may carry an authorization_token.
        check_api_item("mcp_servers", item, owner, f"mcp_servers[{i}]", show_value=False)


def check_seconds(field: str, value: Any, owner: str) -> None:
    """``value`` must be a number of seconds >= 0 (``None``: not set)."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigurationError(
            f"{owner}: {field} must be a number of seconds >= 0, got {_shown(value)}; "
            f"e.g. {field}=30"
        )


#: prompt_cache's places for explicit breakpoints.
CACHE_PLACES = ("system", "tools", "messages")
CACHE_TTLS = ("5m", "1h")


def check_prompt_cache(field: str, value: Any, owner: str) -> None:
    """``prompt_cache``: False, True, ``"5m"``, ``"1h"``, or a list of breakpoint places."""
    if value is None or isinstance(value, bool) or value in CACHE_TTLS:
        return
    fix = (
        "pass False (off), True or '5m' (automatic, 5-minute cache), '1h' (automatic, "
        "one hour), or a list of breakpoint places from "
        f"{', '.join(repr(p) for p in CACHE_PLACES)}"
    )
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigurationError(f"{owner}: prompt_cache={_shown(value)} is not a choice; {fix}")
    places = list(value)
    wrong = [p for p in places if p not in CACHE_PLACES]
    if wrong or not places or len(set(places)) != len(places):
        what = f"unknown place(s) {wrong!r}" if wrong else "an empty or repeated list"
        raise ConfigurationError(f"{owner}: prompt_cache has {what}; {fix}")


def _flag(field: str, value: Any, owner: str) -> None:
    check_flag(field, value, owner)


_OWN_CHECKS: dict[str, Any] = {
    "max_turns": check_positive_int,
    "extra_headers": lambda f, v, o: check_mapping(f, v, o, str_values=True),
    "env": lambda f, v, o: check_mapping(f, v, o, str_values=True),
    "effort": check_effort,
    "max_retry_wait": check_seconds,
    "continue_on_max_tokens": _flag,
    "prompt_cache": check_prompt_cache,
    "batch": _flag,
}
