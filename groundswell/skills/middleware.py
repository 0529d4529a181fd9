"""``skills=[...]``: local `Skill` folders and API skills.

A local skill's name and description join the system prompt and a
``read_skill`` tool serves its instructions and the files of its folder;
API skill dicts go to the request's ``container.skills``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from ..errors import ConfigurationError
from .local import Skill, skills_system_text, skills_tool, warn_missing_tools

__all__ = ["Skills"]

_LOCAL = "skills:local"


class Skills(Middleware):
    """Give the model its skills: instructions and ``read_skill`` for local ones."""

    name = "skills"
    order = 230
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        return bool(run.settings.get("skills"))

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        skills = list(run.settings["skills"])
        local = [s for s in skills if isinstance(s, Skill)]
        remote = [s for s in skills if isinstance(s, Mapping)]
        if len(local) + len(remote) != len(skills):
            raise ConfigurationError(
                "skills items must be groundswell.Skill objects or API skill dicts"
            )
        if local:
            run.add_system(skills_system_text(local))
            run.tools.add(skills_tool(local))
            run.scratch[_LOCAL] = local
        if remote:
            container = run.settings.get("container")
            merged = dict(container) if isinstance(container, Mapping) else {}
            if isinstance(container, str):
                merged["id"] = container
            merged["skills"] = [*merged.get("skills", []), *remote]
            run.settings["container"] = merged
        return await call_next()

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        # Checked against the first request: only then are all tools there (MCP ones too).
        local = run.scratch.pop(_LOCAL, None)
        if local:
            names = {t.get("name") for t in request.get("tools") or () if isinstance(t, Mapping)}
            warn_missing_tools(local, {n for n in names if isinstance(n, str)})
        return request
