"""AG-UI: serve a workflow or an agent to AG-UI clients (CopilotKit and others).

``app(target)`` is an ASGI application: ``POST /`` takes an AG-UI
``RunAgentInput`` and streams the run as AG-UI events (server-sent events).
Needs the ``agui`` extra: ``pip install "groundswell[agui]"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..agent.core import Agent
    from ..workflow.workflow import Workflow
    from .asgi import AGUIApp

__all__ = ["app"]


def app(
    target: Workflow[..., Any] | Agent[Any],
    *,
    arguments: Callable[[Any], Mapping[str, Any]] | None = None,
) -> AGUIApp:
    """An ASGI application serving ``target`` (a `Workflow` or an `Agent`) over AG-UI.

    ``arguments`` (workflows only) builds the workflow's keyword arguments
    from the ``RunAgentInput``, in place of the default: ``forwardedProps``
    by name, and the last user message's text for the first argument left.
    Raises `ConfigurationError` for another target, or when the ``agui``
    extra is not installed.
    """
    try:
        import ag_ui.core  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            'groundswell.agui needs the ag-ui-protocol package: pip install "groundswell[agui]"'
        ) from None
    from .asgi import AGUIApp

    return AGUIApp(target, arguments=arguments)
