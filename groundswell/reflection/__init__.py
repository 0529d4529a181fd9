"""Reflection: look at a failure, decide whether to try again, and how.

Three levels share one loop:

- **workflow**: a failed ``ctx.step`` is reflected on and run again; the step
  sees the reflection as ``ctx.reflection.last``;
- **agent**: a failed prompt (output that does not validate, a reply that
  cannot be parsed, the tool loop running out of turns, a refusal, a tool
  call cut off at max_tokens) is fed back to the model with the error, and
  the model answers again;
- **prompt**: the same as agent level, switched on for one prompt.

Code may also ask for a reflection itself (``ctx.reflection.reflect()``,
``ctx.reflection.trigger_reflection(reason)``). Each reflection is a
``reflection`` node (between the failed attempt, which stays in the tree
``failed``, and the retry). Strategies come only from the
``register_reflection_strategies`` hook: the kernel registers ``feedback``;
the bundled ``groundswell_reflection`` plugin registers ``llm``.

Modules: ``records`` (settings, results, entries, contexts), ``strategies``
(running one), ``loop`` (the retry loop), ``agents`` (the agent behind a
failure), ``api`` (``ctx.reflection`` and the process-wide switch),
``recoverable`` (which failures another attempt can fix), ``middleware`` (the
default middleware that reflects on a failed prompt).
"""

from __future__ import annotations

from .agents import agent_behind, agents_of
from .api import SWITCH, ReflectionAPI, ReflectionRequested, workflow_reflection_on
from .loop import retry_step, retry_with_reflection
from .records import (
    MAX_ATTEMPTS_CAP,
    Level,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    ReflectionResult,
    Reflector,
    Resolution,
    replace_entry,
    resolve_config,
)
from .recoverable import AGENT_REFLECTABLE, gave_up_on, is_recoverable, mark_given_up
from .strategies import reflect_once, register_reflection_strategies

__all__ = [
    "AGENT_REFLECTABLE",
    "MAX_ATTEMPTS_CAP",
    "SWITCH",
    "Level",
    "ReflectionAPI",
    "ReflectionConfig",
    "ReflectionContext",
    "ReflectionEntry",
    "ReflectionRequested",
    "ReflectionResult",
    "Reflector",
    "Resolution",
    "agent_behind",
    "agents_of",
    "gave_up_on",
    "is_recoverable",
    "mark_given_up",
    "reflect_once",
    "register_reflection_strategies",
    "replace_entry",
    "resolve_config",
    "retry_step",
    "retry_with_reflection",
    "workflow_reflection_on",
]
