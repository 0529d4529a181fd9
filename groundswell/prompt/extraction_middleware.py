"""``Prompt(extract=...)``: extraction rules applied to the answer, stored in ``ctx.state``.

Outside the answer cache (order 220), so an answer from the cache is
extracted exactly like one from the model. A structured answer (any
``response_format``) is searched as its compact JSON, a string answer
(``str``, a string ``Literal`` or ``Enum``) as the string itself.
"""

from __future__ import annotations

from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from ..errors import ExtractionError
from ..model.output_types import OutputType
from ..scrubbing.serialize import jsonable
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .extraction import Extract, extract_all

__all__ = ["Extraction", "extract"]


class Extraction(Middleware):
    """Apply the prompt's `Extract` rules to its answer, as an ``extraction`` node."""

    name = "extraction"
    order = 220

    def active(self, run: PromptRun) -> bool:
        return bool(run.prompt.rules)

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        result = await call_next()
        result.extracted = extract(
            run.prompt.rules, result.output, run.tree, run.node, run.prompt.output_type
        )
        if result.extracted and run.workflow is not None:
            run.workflow.state.update(result.extracted)
        return result


def extract(
    rules: tuple[Extract, ...],
    output: Any,
    tree: EventTree,
    node: EventNode,
    output_type: OutputType | None = None,
) -> dict[str, Any]:
    """Apply ``rules`` to ``output`` (of ``output_type``); returns the values by ``store_as``."""
    # A structured answer is searched as its compact JSON, the same live or cached.
    text = output_type.text(output) if output_type is not None else str(output)
    about = [
        {
            "store_as": r.store_as,
            "pattern": r.regex.pattern,
            "format": r.format,
            "required": r.required,
        }
        for r in rules
    ]
    step = tree.start_node(NodeType.EXTRACTION, "extract", node, payload={"rules": about})
    try:
        values, misses = extract_all(rules, text)
    except ExtractionError as exc:
        tree.end_node(step, NodeStatus.FAILED, error=exc)
        raise
    for miss in misses:
        tree.add_event(step, "extraction_missed", **miss)
    node.payload["extracted"] = jsonable(values)
    tree.end_node(step, NodeStatus.COMPLETED, output=values, record_output=True)
    return values
