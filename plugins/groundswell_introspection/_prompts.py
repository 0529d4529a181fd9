"""``generate_dynamic_prompt``: fill an approved template, check it, and run it if asked.

The checks look at what the model supplied (variable values, the focus area),
never at the developer's template text: the template is trusted, its inputs
are not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from groundswell import (
    ConfigurationError,
    Prompt,
    PromptOverrides,
    ToolError,
    current_agent,
    estimate_tokens,
    is_secret_key,
    scrub,
)

from ._common import Limits, clip, where, workflow_in_tree, workflow_state

__all__ = ["RULES", "build", "safety_check"]


@with_config(ConfigDict(extra="forbid"))
class Constraints(TypedDict, total=False):
    """Rules added to the generated prompt."""

    max_iterations: Annotated[
        int, Field(ge=1, le=50, description="Most model turns the prompt may take (max_turns).")
    ]
    focus_area: Annotated[
        str, Field(min_length=1, max_length=200, description="What to prioritize, e.g. accuracy.")
    ]
    error_handling_strategy: Literal["fail_fast", "collect_and_continue", "best_effort"]


# What Groundswell records in place of a secret (a SecretStr in ctx.state, say).
_REDACTED = "**********"
_STRATEGIES = {
    "fail_fast": "stop at the first error and report it",
    "collect_and_continue": "note each error, go on with the rest, and list the errors at the end",
    "best_effort": "do what you can, skip what fails, and say what you skipped",
}
_ROLE_MARKER = re.compile(
    r"(?im)^\s*(human|assistant|system|user)\s*:|</?\s*(system|instructions?|user|assistant)\b[^>]*>"
)
_TEMPLATE_SYNTAX = re.compile(r"\{\{|\}\}|\{%|%\}|\$\{")
_OVERRIDE = re.compile(
    r"(?i)\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(instructions?|rules|guidelines|"
    r"system prompt|constraints|guardrails)\b|\b(disable|bypass|turn off|switch off)\b[^.\n]{0,30}"
    r"\b(safety|guardrails?|filters?|checks?|moderation)\b|\byou are now\b|\bjailbreak"
)
_CODE = re.compile(
    r"(?i)<script\b|javascript:|\b__import__\s*\(|\b(eval|exec)\s*\(|\bos\.system\s*\(|"
    r"\bsubprocess\.|\brm\s+-rf\b"
)
#: The safety rules every generated prompt is checked against, in order.
RULES = (
    "approved_template",
    "plain_placeholders",
    "scalar_values",
    "no_escaping_template",
    "no_disabling_safety_features",
    "no_code_injection",
    "no_secrets",
    "within_token_limit",
)
# Agent settings a generated prompt leaves as they are (when the agent sets them).
_KEPT = (
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "thinking",
    "tools",
    "mcps",
    "skills",
    "hooks",
    "max_turns",
    "token_budget",
    "cache",
    "reflection",
    "system",
)


def safety_check(values: Mapping[str, Any], tokens: int, max_tokens: int) -> dict[str, Any]:
    """The report on what the model supplied: ``passed``, ``issues_found``, ``validation_rules_applied``."""
    issues: list[dict[str, Any]] = []

    def issue(rule: str, name: str, message: str) -> None:
        issues.append({"rule": rule, "variable": name, "message": message})

    for name, value in values.items():
        text = str(value)
        if _TEMPLATE_SYNTAX.search(text) or _ROLE_MARKER.search(text):
            issue(
                "no_escaping_template",
                name,
                "the value holds template syntax or a role marker (Human:, <system>, ...)",
            )
        if _OVERRIDE.search(text):
            issue(
                "no_disabling_safety_features",
                name,
                "the value tells the model to ignore its instructions or switch off checks",
            )
        if _CODE.search(text):
            issue("no_code_injection", name, "the value holds code meant to be executed")
        if is_secret_key(name) or scrub(text) != text:
            issue("no_secrets", name, "the value is, or holds, a secret")
    if tokens > max_tokens:
        issue(
            "within_token_limit",
            "*",
            f"the prompt is about {tokens} tokens; the limit is {max_tokens}",
        )
    return {"passed": not issues, "issues_found": issues, "validation_rules_applied": list(RULES)}


def _constrained(prompt: Prompt[Any], constraints: Mapping[str, Any]) -> Prompt[Any]:
    """``prompt`` with the constraints as a section of its system prompt."""
    lines = []
    if "focus_area" in constraints:
        lines.append(f"- Focus on: {constraints['focus_area']}.")
    if "error_handling_strategy" in constraints:
        lines.append(f"- On errors: {_STRATEGIES[constraints['error_handling_strategy']]}.")
    if "max_iterations" in constraints:
        turns = constraints["max_iterations"]
        lines.append(f"- Finish within {turns} model turn{'s' if turns != 1 else ''}.")
    if not lines:
        return prompt
    section = "Constraints:\n" + "\n".join(lines)
    system = prompt.system
    if system is None:
        return prompt.with_(system=section)
    assert isinstance(system, str)  # a template's system is text
    return prompt.with_(system=f"{system}\n\n{section}")


def _execution(agent: Any, prompt: Prompt[Any], constraints: Mapping[str, Any]) -> dict[str, Any]:
    """Which of the agent's settings the prompt replaces, and which it keeps."""
    override = []
    if prompt.system is not None:
        override.append("system")
    if prompt.response_format is not None:
        override.append("response_format")
    if "max_iterations" in constraints:
        override.append("max_turns")
    config = getattr(agent, "config", {})
    preserve = [
        name
        for name in _KEPT
        if name not in override and config.get(name) not in (None, False, [], {})
    ]
    return {"will_override": override, "will_preserve": preserve}


def _from_state(
    state: Any, names: set[str], given: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """``given`` plus the missing placeholders found as plain values in the workflow's state."""
    filled = dict(given)
    taken = []
    if isinstance(state, Mapping):
        for name in sorted(names - set(given)):
            value = state.get(name)
            # A secret (or a redacted one) never goes into a prompt from here.
            if isinstance(value, str | int | float | bool) and not is_secret_key(name):
                if isinstance(value, str) and (_REDACTED in value or scrub(value) != value):
                    continue
                filled[name] = value
                taken.append(name)
    return filled, taken


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The ``generate_dynamic_prompt`` tool."""
    max_chars = limits.max_chars

    async def generate_dynamic_prompt(
        template: str,
        variables: dict[str, Any] | None = None,
        dry_run: bool = True,
        target_workflow_id: str | None = None,
        additional_constraints: Constraints | None = None,
    ) -> dict[str, Any]:
        """Build a prompt from an approved template and safety-check it; with dry_run=false
        also run it and return the answer.

        Args:
            template: The name of an approved prompt template.
            variables: Values for the template's placeholders (strings, numbers, booleans).
            dry_run: Only build and check the prompt (true), or also run it (false).
            target_workflow_id: The workflow of this run the prompt is for (e.g. one you
                spawned); placeholders missing from variables are filled from its state.
            additional_constraints: Rules added to the prompt's system prompt:
                max_iterations (also enforced as its turn limit), focus_area,
                error_handling_strategy.
        """
        tool = "generate_dynamic_prompt"
        frame = where(tool)
        agent = current_agent()
        templates = dict(getattr(agent, "prompt_templates", {}) or {})
        chosen = templates.get(template)
        if chosen is None:
            raise ToolError(
                f"prompt template {template!r} is not approved; approved templates: {sorted(templates)}"
            )
        given = dict(variables or {})
        from_state: list[str] = []
        target = None
        if target_workflow_id is not None:
            target = workflow_in_tree(frame.tree, target_workflow_id, tool)
            state = workflow_state(frame, target)
            given, from_state = _from_state(state, chosen.placeholders(), given)
        try:
            prompt: Prompt[Any] = chosen.render(given)
        except ConfigurationError as exc:
            where_from = (
                f" (filled from the state of workflow {target.name!r}: {from_state})"
                if target
                else ""
            )
            raise ToolError(f"{exc}{where_from}") from None
        constraints = dict(additional_constraints or {})
        prompt = _constrained(prompt, constraints)
        tokens = estimate_tokens(prompt.user) + estimate_tokens(prompt.system or "")
        supplied = dict(given)
        if "focus_area" in constraints:
            supplied["focus_area"] = constraints["focus_area"]
        report = safety_check(supplied, tokens, limits.max_prompt_tokens)
        answer: dict[str, Any] = {
            "template": template,
            "valid": report["passed"],
            "dry_run": dry_run,
            "prompt": {
                "user": clip(prompt.user, max_chars),
                "system": clip(prompt.system, max_chars) if prompt.system else None,
                "response_format": prompt.output_type.name if prompt.output_type else None,
            },
            "status": "validated" if report["passed"] else "rejected",
            "target_workflow_id": target.id if target else None,
            "prompt_token_count": tokens,
            "safety_check": report,
            "execution_parameters": _execution(agent, prompt, constraints),
        }
        if target is not None:
            answer["variables_from_state"] = from_state
        if constraints:
            answer["constraints"] = constraints
        if dry_run or not report["passed"]:
            return answer
        assert agent is not None
        turns = additional_constraints.get("max_iterations") if additional_constraints else None
        overrides = PromptOverrides(max_turns=turns) if turns else None
        result = await agent.run(prompt, overrides)
        answer.update(
            status="completed",
            node_id=result.node.id,
            output=clip(result.node.payload.get("output"), max_chars),
            tool_call_node_id=frame.node.id,
        )
        return answer

    return [generate_dynamic_prompt]
