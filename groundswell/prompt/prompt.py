"""Prompts and per-call overrides.

Precedence for every setting: ``PromptOverrides`` > ``Prompt`` > ``Agent``.
A setting left as ``None`` is "not set" and falls through to the next level.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

if TYPE_CHECKING:
    from typing import Unpack

from ..budget.token_budget import TokenBudget, check_budget, check_retention
from ..cache.backends import Cache
from ..cache.canonical import canonical_json
from ..errors import ConfigurationError
from ..hooks.runner import check_hooks
from ..hookspecs import CacheBackend
from ..mcp.bridge import check_mcps
from ..model.output_types import OutputType, output_type
from ..model.request_fields import sdk_fields
from ..model.request_settings import (
    RequestKeywords,
    RequestSettings,
    set_fields_repr,
    takes_request_fields,
)
from ..model.settings_check import check_api_field, check_flag, check_settings
from ..plugins.manager import get_plugin_manager
from ..reflection import ReflectionConfig
from ..skills.local import check_skills
from ..tools.tool import check_context_ttl, check_tools
from .extraction import Extract, check_rules

__all__ = [
    "Prompt",
    "PromptOverrides",
    "PromptTemplate",
    "check_cache_name",
    "create_prompt",
    "render_user",
]

T = TypeVar("T")
#: The prompt fields that, when set, win over the agent's (`Agent.settings_for`), with
#: every request setting (`RequestSettings`).
WINNING_FIELDS = ("system", "tools", "mcps", "skills", "hooks")


def render_user(user: str, data: Any) -> str:
    """The user turn for ``user`` and ``data``.

    ``data`` is appended as canonical JSON (keys sorted, two-space indent)
    inside ``<data>`` tags, so equal data always renders to the same text::

        Judge this diff

        <data>
        {
          "diff": "..."
        }
        </data>
    """
    if data is None:
        return user
    return f"{user}\n\n<data>\n{canonical_json(data, indent=2)}\n</data>"


@takes_request_fields
@dataclass(frozen=True, kw_only=True, repr=False)
class Prompt(RequestSettings, Generic[T]):
    """One request to an agent: the user text, data, and the type of answer wanted.

    Immutable; ``prompt.with_(user=...)`` derives a new one. ``response_format``
    is a type pydantic's ``TypeAdapter`` takes (a model class, ``int``,
    ``list[str]``, a ``Literal``, an ``Enum``, a union of models, a
    ``TypedDict``, a dataclass...; the agent returns a validated value of it)
    or ``None`` (the agent returns the text); see `groundswell.model.output_types.OutputType`
    for how answers that are not objects travel. ``enable_reflection`` switches
    prompt-level reflection on (or off) for this prompt, whatever the agent says.
    ``extract`` is an `Extract` rule or a list of them,
    applied to the answer text (see `groundswell.prompt.extraction`).
    Every request setting (`RequestSettings`: each request field of the SDK's
    by its API name, ``effort``, ``prompt_cache``, ``batch``...) may be set here
    too, and wins over the agent's.
    """

    user: str
    data: Any = None
    # Any: a Literal, a union or an Annotated type is no `type[T]` to a type checker.
    response_format: Any = None
    system: str | Sequence[Mapping[str, Any]] | None = None
    tools: Sequence[Any] | None = None
    mcps: Sequence[Any] | None = None
    skills: Sequence[Any] | None = None
    hooks: Mapping[str, Any] | None = None
    enable_reflection: bool | None = None
    extract: Extract | Sequence[Extract] | None = None
    _rendered: str = dataclasses.field(default="", init=False, repr=False, compare=False)
    _rules: tuple[Extract, ...] = dataclasses.field(
        default=(), init=False, repr=False, compare=False
    )
    _output: OutputType | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    #: (name, value) of the fields set here that win over the agent's (`WINNING_FIELDS`),
    #: found once. A class attribute, so no dataclass field: `fields()` and snapshots
    #: of a prompt stay as they were.
    wins: ClassVar[tuple[tuple[str, Any], ...]] = ()

    if TYPE_CHECKING:  # the dataclass's own __init__ at run time; these type it

        @overload
        def __init__(
            self: Prompt[str],
            *,
            user: str,
            data: Any = ...,
            response_format: None = ...,
            system: str | Sequence[Mapping[str, Any]] | None = ...,
            tools: Sequence[Any] | None = ...,
            mcps: Sequence[Any] | None = ...,
            skills: Sequence[Any] | None = ...,
            hooks: Mapping[str, Any] | None = ...,
            enable_reflection: bool | None = ...,
            extract: Extract | Sequence[Extract] | None = ...,
            **settings: Unpack[RequestKeywords],
        ) -> None: ...
        @overload
        def __init__(
            self: Prompt[T],
            *,
            user: str,
            data: Any = ...,
            response_format: type[T],
            system: str | Sequence[Mapping[str, Any]] | None = ...,
            tools: Sequence[Any] | None = ...,
            mcps: Sequence[Any] | None = ...,
            skills: Sequence[Any] | None = ...,
            hooks: Mapping[str, Any] | None = ...,
            enable_reflection: bool | None = ...,
            extract: Extract | Sequence[Extract] | None = ...,
            **settings: Unpack[RequestKeywords],
        ) -> None: ...
        @overload  # Literal[...], unions, Annotated: typed as Any
        def __init__(
            self: Prompt[Any],
            *,
            user: str,
            data: Any = ...,
            response_format: Any,
            system: str | Sequence[Mapping[str, Any]] | None = ...,
            tools: Sequence[Any] | None = ...,
            mcps: Sequence[Any] | None = ...,
            skills: Sequence[Any] | None = ...,
            hooks: Mapping[str, Any] | None = ...,
            enable_reflection: bool | None = ...,
            extract: Extract | Sequence[Extract] | None = ...,
            **settings: Unpack[RequestKeywords],
        ) -> None: ...
        def __init__(self, **fields: Any) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user.strip():
            raise ConfigurationError(
                f"Prompt.user must be a non-empty string, got {self.user!r:.60}"
            )
        if self.enable_reflection is not None and not isinstance(self.enable_reflection, bool):
            raise ConfigurationError(
                f"Prompt.enable_reflection must be True, False or None, got {self.enable_reflection!r}"
            )
        if self.response_format is not None:
            try:  # made once per type: the schema and validator every call then uses
                made = output_type(self.response_format)
            except ConfigurationError as exc:
                raise ConfigurationError(f"Prompt.{exc}") from exc.__cause__
            object.__setattr__(self, "_output", made)
        # The fields that win over the agent's, checked as the agent checks its own.
        check_api_field("system", self.system, "Prompt")
        settings = self.request_settings()
        if settings:
            check_settings("Prompt", settings)
        if self.tools is not None:
            check_tools(self.tools, "Prompt")
        if self.mcps is not None:
            check_mcps(self.mcps, {}, "Prompt")
        if self.skills is not None:
            check_skills(self.skills, "Prompt")
        if self.hooks is not None:
            check_hooks(self.hooks, "Prompt")
        try:
            rendered = render_user(self.user, self.data)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"Prompt.data cannot be rendered: {exc}") from exc
        # Rendering once here both validates data and spares every call the work.
        object.__setattr__(self, "_rendered", rendered)
        object.__setattr__(self, "_rules", check_rules(self.extract))
        object.__setattr__(self, "wins", _wins(self))

    @classmethod
    def of_text(cls, user: str) -> Prompt[str]:
        """``Prompt(user=user)``, made without re-checking the fields it leaves unset.

        ``agent.prompt("...")`` makes one per call; this is its fast path.
        """
        if not user or user.isspace():  # `not user.strip()`, without a copy of the text
            raise ConfigurationError(f"Prompt.user must be a non-empty string, got {user!r:.60}")
        made: Prompt[str] = _new(Prompt)
        fields = _BLANK.__dict__.copy()
        fields["user"] = fields["_rendered"] = user  # no data: the user turn is the text
        # The whole dict at once (frozen: through object's setter), not key by key.
        _set_attribute(made, "__dict__", fields)
        return made

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A prompt pickled before `wins` existed (a durable run's input, say)
        # gets it here, or its system, tools... would be ignored.
        self.__dict__.update(state)
        if "wins" not in state:
            self.__dict__["wins"] = _wins(self)

    @property
    def output_type(self) -> OutputType | None:
        """How ``response_format`` is asked for and validated (``None`` without one)."""
        return self._output

    @property
    def rules(self) -> tuple[Extract, ...]:
        """The extraction rules of ``extract``, as a tuple (empty when none)."""
        return self._rules

    def with_(self, **changes: Any) -> Prompt[Any]:
        """A copy with ``changes`` applied (the original is unchanged)."""
        own = {f.name for f in dataclasses.fields(self) if f.init}
        unknown = sorted(set(changes) - own - sdk_fields())
        if unknown:
            raise ConfigurationError(f"Prompt has no field(s) {unknown}")
        more = {k: changes.pop(k) for k in [k for k in changes if k not in own]}
        if more:  # the SDK's fields with no keyword of their own: beside the ones set
            changes["request_fields"] = {**(self.request_fields or {}), **more}
        return dataclasses.replace(self, **changes)

    def render(self) -> str:
        """The user turn sent to the model (see `render_user`)."""
        return self._rendered

    def __repr__(self) -> str:
        return set_fields_repr(self, "user")


@takes_request_fields
@dataclass(frozen=True, kw_only=True, repr=False)
class PromptOverrides(RequestSettings):
    """Per-call settings that win over the prompt and the agent.

    Takes every request setting (`RequestSettings`: each request field of the
    installed SDK's by its API name, ``effort``, ``prompt_cache``,
    ``continue_on_max_tokens``, ``max_retry_wait``, ``batch``), plus ``system``,
    ``tools``, ``mcps``,
    ``skills``, ``hooks``, ``env``, ``max_turns``, ``token_budget`` (a
    `TokenBudget`), ``context_ttl``, ``context_retention``, ``cache`` (a backend name or
    `Cache`), ``enable_cache``/``disable_cache`` (either spelling: ``enable_cache=False``
    is ``disable_cache=True``; ``enable_cache=True`` also turns the answer cache on for
    an agent built without one), ``enable_reflection``,
    ``reflection`` (a `ReflectionConfig`) and ``middleware`` (registered
    names or `Middleware` instances added to the agent's for this call).
    """

    system: str | Sequence[Mapping[str, Any]] | None = None
    tools: Sequence[Any] | None = None
    mcps: Sequence[Any] | None = None
    skills: Sequence[Any] | None = None
    hooks: Mapping[str, Any] | None = None
    env: Mapping[str, str] | None = None
    max_turns: int | None = None
    token_budget: TokenBudget | None = None
    context_ttl: int | None = None
    context_retention: str | None = None
    cache: Any = None
    disable_cache: bool | None = None
    enable_cache: bool | None = None
    enable_reflection: bool | None = None
    reflection: ReflectionConfig | None = None
    middleware: Sequence[Any] | None = None

    def __post_init__(self) -> None:
        owner = "PromptOverrides"
        check_settings(owner, self.set_fields())
        check_flag("disable_cache", self.disable_cache, owner)
        check_flag("enable_cache", self.enable_cache, owner)
        if self.enable_cache is not None and self.disable_cache is self.enable_cache:
            raise ConfigurationError(
                f"{owner}: enable_cache={self.enable_cache} and disable_cache="
                f"{self.disable_cache} say opposite things; give one of them"
            )
        if self.tools is not None:
            check_tools(self.tools, owner)
        if self.mcps is not None:
            check_mcps(self.mcps, self.env or {}, owner)
        if self.skills is not None:
            check_skills(self.skills, owner)
        if self.hooks is not None:
            check_hooks(self.hooks, owner)
        if self.middleware is not None and (
            isinstance(self.middleware, str) or not isinstance(self.middleware, Sequence)
        ):
            raise ConfigurationError(
                "PromptOverrides.middleware must be a list of registered middleware names or "
                f"groundswell.Middleware instances, got {self.middleware!r:.60}"
            )
        if self.enable_reflection is not None and not isinstance(self.enable_reflection, bool):
            raise ConfigurationError(
                "PromptOverrides.enable_reflection must be True, False or None, "
                f"got {self.enable_reflection!r}"
            )
        if self.reflection is not None and not isinstance(self.reflection, ReflectionConfig):
            raise ConfigurationError(
                "PromptOverrides.reflection must be a ReflectionConfig, "
                f"got {type(self.reflection).__name__}"
            )
        check_budget(self.token_budget, owner)
        check_context_ttl(self.context_ttl, owner)
        check_retention(self.context_retention, owner)
        check_cache_name(self.cache, owner)

    def __repr__(self) -> str:
        return set_fields_repr(self)

    def set_fields(self) -> dict[str, Any]:
        """The settings given explicitly (not ``None``), ``request_fields`` spread out."""
        found = {
            name: value for name in _OVERRIDE_FIELDS if (value := getattr(self, name)) is not None
        }
        more = found.pop("request_fields", None)
        if more:
            found.update(more)
        return found


def check_cache_name(cache: Any, owner: str) -> None:
    """``cache=``: a `Cache`, or the name of a registered backend (looked up now).

    A backend a plugin registers later is not found: register plugins before
    building the agents, overrides and workflows that name their backends.
    """
    if cache is None or isinstance(cache, Cache):
        return
    if not isinstance(cache, str):
        raise ConfigurationError(
            f"{owner}: cache must be a backend name (e.g. 'lru', 'redis') or a groundswell.Cache, "
            f"got {type(cache).__name__}"
        )
    try:
        get_plugin_manager().lookup(CacheBackend, cache)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: cache: {exc}") from None


_OVERRIDE_FIELDS = tuple(f.name for f in dataclasses.fields(PromptOverrides))
NO_OVERRIDES = PromptOverrides()


_IDENTIFIER = string.ascii_letters + string.digits + "_"


def _wins(prompt: Prompt[Any]) -> tuple[tuple[str, Any], ...]:
    """(name, value) of the `WINNING_FIELDS` and request settings ``prompt`` sets."""
    found = [
        (name, value) for name in WINNING_FIELDS if (value := getattr(prompt, name)) is not None
    ]
    # getattr: a prompt pickled before request settings existed has none of them.
    found.extend(RequestSettings.request_settings(prompt).items())
    return tuple(found)


# Every field at its default, checked once: what `Prompt.of_text` copies.
_BLANK: Prompt[str] = Prompt(user="-")
_new = object.__new__
_set_attribute = object.__setattr__


@dataclass(frozen=True, kw_only=True)
class PromptTemplate:
    """A prompt an agent may build at run time from variables (``generate_dynamic_prompt``).

    ``user`` and ``system`` are `str.format` templates with plain named
    placeholders (``"Summarize {topic} in {words} words"``); every placeholder
    is a required variable. ``variables`` describes them (name → description)
    for the model; values must be strings, numbers or booleans.
    ``response_format`` takes what `Prompt` takes (a model, ``list[str]``,
    a ``Literal``, ...).
    """

    user: str
    description: str = ""
    system: str | None = None
    response_format: Any = None
    variables: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user.strip():
            raise ConfigurationError("PromptTemplate.user must be a non-empty template string")
        if self.response_format is not None:
            try:  # refused here, not when the model first renders the template
                output_type(self.response_format)
            except ConfigurationError as exc:
                raise ConfigurationError(f"PromptTemplate.{exc}") from exc.__cause__
        names = self.placeholders()
        declared = set(self.variables or {})
        if self.variables is not None and declared != names:
            raise ConfigurationError(
                f"PromptTemplate.variables {sorted(declared)} do not match the placeholders "
                f"{sorted(names)} of its templates"
            )

    def placeholders(self) -> set[str]:
        """The variable names the templates use."""
        names: set[str] = set()
        for template in (self.user, self.system or ""):
            try:
                parsed = list(string.Formatter().parse(template))
            except ValueError as exc:
                raise ConfigurationError(
                    f"PromptTemplate: bad template {template!r:.60}: {exc}"
                ) from exc
            for _, field_name, _, _ in parsed:
                if field_name is None:
                    continue
                # Attribute and index lookups ("{x.__class__}") would let a model read objects.
                if not field_name or not all(c in _IDENTIFIER for c in field_name):
                    raise ConfigurationError(
                        f"PromptTemplate: placeholder {{{field_name}}} must be a plain name"
                    )
                names.add(field_name)
        return names

    def input_schema(self) -> dict[str, Any]:
        """A JSON schema for the variables."""
        described = dict(self.variables or {})
        names = sorted(self.placeholders())
        return {
            "type": "object",
            "properties": {
                name: {
                    "type": ["string", "number", "boolean"],
                    **({"description": described[name]} if name in described else {}),
                }
                for name in names
            },
            "required": names,
            "additionalProperties": False,
        }

    def render(self, variables: Mapping[str, Any]) -> Prompt[Any]:
        """The `Prompt` for these variables; `ConfigurationError` if they do not fit."""
        if not isinstance(variables, Mapping):
            raise ConfigurationError(
                f"template variables must be an object, got {type(variables).__name__}"
            )
        names = self.placeholders()
        missing = sorted(names - set(variables))
        unknown = sorted(set(variables) - names)
        if missing or unknown:
            raise ConfigurationError(
                f"template variables do not fit: missing {missing}, unknown {unknown}; "
                f"expected exactly {sorted(names)}"
            )
        bad = [k for k, v in variables.items() if not isinstance(v, str | int | float | bool)]
        if bad:
            raise ConfigurationError(
                f"template variables {sorted(bad)} must be strings, numbers or booleans"
            )
        values = {k: str(v) for k, v in variables.items()}
        return Prompt(
            user=self.user.format_map(values),
            system=self.system.format_map(values) if self.system else None,
            response_format=self.response_format,
        )


def create_prompt(user: str, **fields: Any) -> Prompt[Any]:
    """Build a `Prompt` at run time (e.g. inside a tool or step)."""
    return Prompt(user=user, **fields)
