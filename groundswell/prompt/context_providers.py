"""Context providers: text added to an agent's system prompt before each prompt runs.

``Agent(context=[...])`` lists providers by name (registered through the
``register_context_providers`` hook, e.g. ``"history"`` from the bundled
session history plugin) or as callables. Each is asked once per prompt with a
`ContextRequest` and returns text (or ``None`` for nothing); the texts
are appended to the system prompt in list order.

A provider that fails, or takes longer than ``TIMEOUT_S``, never fails the
prompt: its section is left out and a ``context_error`` event on the prompt
node says why (logged once until the provider works again). Sections pass
through `groundswell.redact`, so registered secrets never reach the
model through them. Each section added is recorded as a ``context`` event
(provider name and size), and the full system prompt is on the prompt node
as ``payload["system"]``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from ..hookspecs import ContextProvider
from ..plugins.manager import get_plugin_manager
from ..scrubbing.serialize import redact
from ..tree.tree import EventNode, EventTree

__all__ = ["ContextRequest", "check_context", "gather_context"]

logger = logging.getLogger("groundswell.context")
#: Seconds an async provider may take before the prompt goes on without it.
TIMEOUT_S = 10.0
# Providers whose last call failed: logged once, not once per prompt.
_failing: set[str] = set()


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a context provider knows about the prompt it adds context to.

    ``agent`` is the agent's name, ``user`` the rendered user message, ``tree``
    and ``node`` the run and the prompt's node, ``state`` the workflow's state
    (empty outside a workflow).
    """

    agent: str
    user: str
    tree: EventTree
    node: EventNode
    state: Mapping[str, Any] = field(default_factory=dict)

    def nearest_event(self, type: str) -> dict[str, Any] | None:
        """The latest event of ``type`` on the prompt node or its nearest ancestor that has one."""
        for node in (self.node, *self.tree.get_ancestors(self.node.id)):
            for event in reversed(node.events):
                if event.get("type") == type:
                    return dict(event)
        return None


def check_context(items: Sequence[Any] | None, owner: str) -> list[Any]:
    """Validate ``Agent(context=...)``: provider names (registered ones) or callables."""
    if items is None:
        return []
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"{owner}: context must be a list of provider names or callables, "
            f"e.g. context=['history']; got {items!r}"
        )
    for item in items:
        if isinstance(item, str) and item.strip():
            _record(item)  # an unknown name fails here, not at the first prompt
        elif not (callable(item) or callable(getattr(item, "provide", None))):
            raise ConfigurationError(
                f"{owner}: context items must be provider names (str), callables taking a "
                f"ContextRequest, or objects with provide(request); got {type(item).__name__}"
            )
    return list(items)


def _record(name: str) -> ContextProvider:
    return get_plugin_manager().lookup(ContextProvider, name)


def _resolve(item: Any) -> tuple[str, Callable[[ContextRequest], Any]]:
    if not isinstance(item, str):
        name = getattr(item, "__name__", type(item).__name__)
        return name, getattr(item, "provide", item)
    made = _record(item).factory()
    return item, getattr(made, "provide", made)


async def gather_context(items: Sequence[Any], request: ContextRequest) -> list[str]:
    """Ask each provider for its section; failures are recorded, not raised.

    An unknown provider name is a configuration mistake and does raise
    `ConfigurationError`.
    """
    sections: list[str] = []
    for item in items:
        name, provide = _resolve(item)
        try:
            text = provide(request)
            if inspect.isawaitable(text):
                text = await asyncio.wait_for(text, TIMEOUT_S)
        except Exception as exc:  # a broken or stuck provider must not cost the run
            reason = (
                f"no answer within {TIMEOUT_S:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {redact(str(exc))}"
            )
            if name not in _failing:
                _failing.add(name)
                logger.warning(
                    "context provider %r failed (%s); prompts go on without it", name, reason
                )
            request.tree.add_event(request.node, "context_error", provider=name, error=reason)
            continue
        if name in _failing:
            _failing.discard(name)
            logger.warning("context provider %r works again", name)
        if text is None or not str(text).strip():
            continue
        section = str(redact(str(text).strip()))
        sections.append(section)
        request.tree.add_event(request.node, "context", provider=name, chars=len(section))
    return sections
