"""Example 9: reflection at workflow, agent and prompt level.

- workflow level: a step that fails (a flaky pricing service) is reflected on
  by a critic agent, then run again; the retry reads ``ctx.reflection.last``;
- agent level: the estimator's answer breaks a rule of its response model
  (``low`` above ``high``); the error goes back to the model, which corrects it;
- prompt level: one prompt to a non-reflecting agent switches reflection on
  for itself (a title over the length limit).

Each reflection is a ``reflection`` node between the failed attempt and the
retry, with the analysing model call inside it. Offline, a scripted fake makes
the first answers wrong; with ANTHROPIC_API_KEY set the real model answers
(and may well get it right the first time).
"""

from __future__ import annotations

import asyncio
import json
import sys

from pydantic import BaseModel, Field, model_validator

from groundswell import Agent, Prompt, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client


class Estimate(BaseModel):
    low: int = Field(description="Smallest plausible number of days")
    high: int = Field(description="Largest plausible number of days")

    @model_validator(mode="after")
    def ordered(self) -> Estimate:
        if self.low > self.high:
            raise ValueError("low must not be greater than high")
        return self


class Title(BaseModel):
    title: str = Field(max_length=40)


def offline_model(request: MessagesRequest) -> str:
    """The fake's answers: wrong at first, right once the error was fed back."""
    asked = request.last_user_text()
    if "An attempt failed" in asked:  # the llm strategy asking for an analysis
        timed_out = "TimeoutError" in asked
        return json.dumps(
            {
                "analysis": "The pricing service timed out, which is usually transient."
                if timed_out
                else "The answer broke a rule of the required format.",
                "should_retry": True,
                "guidance": "Call it again with a longer timeout."
                if timed_out
                else "Follow the rule named in the error exactly.",
                "revised_system": None,
                "revised_data_json": json.dumps({"timeout_s": 10}) if timed_out else None,
            }
        )
    corrected = "Your previous reply could not be used" in asked
    if "Estimate" in asked:
        return json.dumps({"low": 3, "high": 9} if corrected else {"low": 9, "high": 3})
    if "title" in asked.lower():
        long = "A thorough, detailed and rather long title for the migration plan"
        return json.dumps({"title": "Migration plan" if corrected else long})
    return "Prices look stable."


client = auto_client(FunctionModel(offline_model))
critic = Agent(name="critic", system="You analyse failed steps of a pipeline.", client=client)
estimator = Agent(
    name="estimator", system="You estimate work in days.", enable_reflection=True, client=client
)
writer = Agent(name="writer", system="You write short titles.", client=client)

calls = {"pricing": 0}


def fetch_prices(timeout_s: float) -> dict[str, float]:
    """A pricing service that times out the first time it is called."""
    calls["pricing"] += 1
    if calls["pricing"] == 1:
        raise TimeoutError(f"pricing service did not answer within {timeout_s}s")
    return {"db": 120.0, "cache": 40.0}


@workflow(name="plan-migration", enable_reflection=True, reflection_agent=critic)
async def plan_migration(ctx: WorkflowContext, task: str) -> dict[str, object]:
    # Workflow level: the first attempt fails, the critic reflects, the step runs
    # again and reads the critic's revision from ctx.reflection.last.
    def prices() -> dict[str, float]:
        last = ctx.reflection.last  # None on the first attempt
        if last is not None:
            ctx.state["retried_after"] = last.reason
        revised = (last.revised_data or {}) if last is not None else {}
        return fetch_prices(timeout_s=revised.get("timeout_s", 2))

    # Pass callables (not bare awaitables) to ctx.step so that a step can run again.
    price_list = await ctx.step("prices", prices)

    # Agent level: the estimator reflects on every prompt.
    estimate = await ctx.step(
        "estimate",
        lambda: estimator.prompt(
            Prompt(user="Estimate the work in days.", data={"task": task}, response_format=Estimate)
        ),
    )

    # Prompt level: this one prompt asks for reflection from a non-reflecting agent.
    title = await ctx.step(
        "title",
        lambda: writer.prompt(
            Prompt(
                user="Write a title for this plan.",
                data={"task": task},
                response_format=Title,
                enable_reflection=True,
            )
        ),
    )
    return {"title": title.title, "days": [estimate.low, estimate.high], "prices": price_list}


async def main() -> int:
    try:
        result = await plan_migration.run("Move the orders table to the new database")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\noutput: {result.output}")
    print(f"step retried after: {result.state.get('retried_after')}")
    levels = [n.payload["level"] for n in result.tree.find(type="reflection")]
    print(f"reflections by level: {levels}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
