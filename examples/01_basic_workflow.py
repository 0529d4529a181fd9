"""Example 1: a workflow with steps, branches and a nested workflow.

Run it with ``python examples/01_basic_workflow.py``; it prints the run's tree.
"""

from __future__ import annotations

import asyncio

from groundswell import WorkflowContext, workflow


def count_words(text: str) -> int:
    # A plain sync function: steps run it in a worker thread.
    return len(text.split())


async def shout(text: str) -> str:
    await asyncio.sleep(0.01)  # stands in for real I/O
    return text.upper()


@workflow(name="summarize-line")
async def summarize_line(ctx: WorkflowContext, line: str) -> dict[str, object]:
    words = await ctx.step("count", lambda: count_words(line))
    loud = await ctx.step("shout", lambda: shout(line))
    return {"words": words, "loud": loud}


@workflow(name="report")
async def report(ctx: WorkflowContext, text: str) -> dict[str, object]:
    lines = await ctx.step("split", lambda: [ln for ln in text.splitlines() if ln.strip()])
    # Concurrent steps, each running a nested workflow: all mount in the right place.
    summaries = await asyncio.gather(
        *(ctx.step(f"line-{i}", lambda ln=ln: summarize_line.run(ln)) for i, ln in enumerate(lines))
    )
    ctx.state["lines"] = len(lines)
    ctx.snapshot_state()
    total = sum(int(s.output["words"]) for s in summaries if s.output)
    return {"lines": len(lines), "words": total}


async def main() -> None:
    result = await report.run("the quick brown fox\njumps over\nthe lazy dog")
    print(result.tree.render())
    print(f"\noutput: {result.output}  status: {result.status}  in {result.duration * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
