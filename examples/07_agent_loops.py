"""Example 7: loops calling several agents, with timings, tokens and cache hits.

A writer drafts, a fact checker checks each claim and a critic scores the
draft, round after round until the score is good enough. Every call is a node
with its duration and token usage; claims already checked in an earlier round
are answered by the cache. At the end, a per-agent report is read straight
off the tree: no counters to thread through the code.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections import defaultdict

from pydantic import BaseModel

from groundswell import Agent, EventTree, Prompt, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, json_reply

CLAIMS = ["Groundswell runs on Python 3.11+", "every run is one event tree"]
POINTS = ["It records every call.", "It caches repeated questions.", "It tests offline."]


class Check(BaseModel):
    claim: str
    supported: bool


class Score(BaseModel):
    score: int
    advice: str


def draft_offline(request: MessagesRequest) -> str:
    """Offline writer: each round's draft adds one more point."""
    found = re.search(r'"round": (\d+)', request.last_user_text())
    n = int(found.group(1)) if found else 1
    return " ".join(["Groundswell runs agents.", *POINTS[:n]])


def check_offline(request: MessagesRequest) -> object:
    found = re.search(r'"claim": "(.*)"', request.last_user_text())
    return json_reply({"claim": found.group(1) if found else "", "supported": True})


def score_offline(request: MessagesRequest) -> object:
    """Offline critic: longer drafts score better."""
    points = sum(point in request.last_user_text() for point in POINTS)
    return json_reply({"score": 4 + 2 * points, "advice": "Say what users can see."})


writer = Agent(name="writer", system="Write product copy.", client=auto_client(draft_offline))
checker = Agent(
    name="fact-checker",
    system="Say whether the claim is supported by the docs.",
    enable_cache=True,  # the same claim is checked every round: later rounds hit the cache
    client=auto_client(FunctionModel(check_offline)),
)
critic = Agent(
    name="critic",
    system="Score copy from 0 to 10.",
    temperature=0.0,
    client=auto_client(FunctionModel(score_offline)),
)


@workflow(name="copy-loop")
async def copy_loop(ctx: WorkflowContext, topic: str, target: int = 9) -> str:
    draft = ""
    for n in range(1, 5):
        # Steps take callables (so they can run again); `ask=ask` binds this round's
        # prompt, as a lambda made in a loop otherwise sees the loop's latest values.
        ask = Prompt(user="Draft.", data={"topic": topic, "round": n})
        draft = await ctx.step(f"draft-{n}", lambda ask=ask: writer.prompt(ask))
        checks = await asyncio.gather(
            *(
                ctx.step(
                    f"check-{n}.{i}",
                    lambda claim=claim: checker.prompt(
                        Prompt(user="Check.", data={"claim": claim}, response_format=Check)
                    ),
                )
                for i, claim in enumerate(CLAIMS)
            )
        )
        ask = Prompt(user="Score.", data={"copy": draft}, response_format=Score)
        verdict = await ctx.step(f"score-{n}", lambda ask=ask: critic.prompt(ask))
        ctx.state[f"round_{n}"] = {"score": verdict.score, "checked": len(checks)}
        if verdict.score >= target:
            break
    return draft


def report(tree: EventTree) -> str:
    """Calls, model calls, tokens, cache hits and time per agent, from the tree alone."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for node in tree.find(type="prompt"):
        row = rows[node.name]
        row["prompts"] += 1
        row["hits"] += node.metrics.get("cache") == "hit"
        row["model calls"] += sum(c.type == "model_call" for c in node.children)
        usage = node.metrics.get("usage") or {}
        row["tokens in"] += usage.get("input_tokens", 0)
        row["tokens out"] += usage.get("output_tokens", 0)
        row["ms"] += (node.metrics.get("duration") or 0.0) * 1000
    columns = ["prompts", "model calls", "hits", "tokens in", "tokens out", "ms"]
    lines = [f"{'agent':<14}" + "".join(f"{c:>12}" for c in columns)]
    for name, row in sorted(rows.items()):
        cells = "".join(f"{row[c]:>12.1f}" if c == "ms" else f"{int(row[c]):>12}" for c in columns)
        lines.append(f"{name:<14}{cells}")
    return "\n".join(lines)


async def main() -> int:
    try:
        result = await copy_loop.run("observability")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\nfinal copy: {result.output}")
    print(f"rounds: {result.state}\n")
    print(report(result.tree))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
