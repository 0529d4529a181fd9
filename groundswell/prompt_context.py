"""Context providers: text added to an agent's system prompt before each prompt runs.

``Agent(context=[...])`` lists providers by name (registered through the
``register_context_providers`` hook, e.g. ``"history"`` from the bundled
session history plugin) or as callables. Each is asked once per prompt with a
:class:`ContextRequest` and returns text (or ``None`` for nothing); the texts
are appended to the system prompt in list order.

A provider that fails never fails the prompt: its section is left out and a
``context_error`` event on the prompt node says why. Each section that is
added is recorded as a ``context`` event (provider name and size), and the
full system prompt is on the prompt node as ``payload["system"]``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._serialize import redact
from .errors import ConfigurationError
from .plugins import get_plugin_manager
from .tree import EventNode, EventTree

__all__ = ["ContextRequest", "check_context", "gather_context"]

logger = logging.getLogger("groundswell.context")


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
    """Validate ``Agent(context=...)``: provider names or callables."""
    if items is None:
        return []
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"{owner}: context must be a list of provider names or callables, "
            f"e.g. context=['history']; got {items!r}"
        )
    for item in items:
        if not (isinstance(item, str) and item.strip()) and not callable(item):
            raise ConfigurationError(
                f"{owner}: context items must be provider names (str) or callables "
                f"taking a ContextRequest; got {type(item).__name__}"
            )
    return list(items)


def _resolve(item: Any) -> tuple[str, Callable[[ContextRequest], Any]]:
    if not isinstance(item, str):
        name = getattr(item, "__name__", type(item).__name__)
        return name, getattr(item, "provide", item)
    providers = get_plugin_manager().context_providers()
    record = providers.get(item)
    if record is None:
        hint = " (the history provider needs: pip install 'groundswell[history]')"
        raise ConfigurationError(
            f"no context provider named {item!r}; available: "
            f"{sorted(providers) or 'none installed'}{hint if item == 'history' else ''}"
        )
    made = record.factory()
    return item, getattr(made, "provide", made)


async def gather_context(items: Sequence[Any], request: ContextRequest) -> list[str]:
    """Ask each provider for its section; failures are recorded, not raised.

    An unknown provider name is a configuration mistake and does raise
    :class:`~groundswell.ConfigurationError`.
    """
    sections: list[str] = []
    for item in items:
        name, provide = _resolve(item)
        try:
            text = provide(request)
            if inspect.isawaitable(text):
                text = await text
        except Exception as exc:  # a broken provider must not cost the run
            message = f"{type(exc).__name__}: {redact(str(exc))}"
            logger.warning("context provider %r failed for %s: %s", name, request.agent, message)
            request.tree.add_event(request.node, "context_error", provider=name, error=message)
            continue
        if text is None or not str(text).strip():
            continue
        text = str(text).strip()
        sections.append(text)
        request.tree.add_event(request.node, "context", provider=name, chars=len(text))
    return sections
