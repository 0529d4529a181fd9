"""Example 4: workflows inside workflows.

``deploy`` runs ``build`` inside a step (``await build.run(...)`` returns the
child's ``WorkflowResult``), then spawns one ``rollout`` per region with
``ctx.spawn_workflow`` (which returns the child's output), three levels deep.
One region fails: its error is caught by the parent, which carries on, and the
failed child stays in the tree, marked failed, where it ran.
"""

from __future__ import annotations

import asyncio

from groundswell import WorkflowContext, WorkflowError, workflow


@workflow(name="build")
async def build(ctx: WorkflowContext, version: str) -> str:
    await ctx.step("compile", lambda: f"compiled {version}")
    await ctx.step("test", lambda: "48 passed")
    return await ctx.step("package", lambda: f"app-{version}.tar.gz")


@workflow(name="health-check")
async def health_check(ctx: WorkflowContext, region: str) -> bool:
    healthy = await ctx.step("probe", lambda: region != "ap-south")
    if not healthy:
        raise RuntimeError(f"{region} answered 503 after the rollout")
    return healthy


@workflow(name="rollout")
async def rollout(ctx: WorkflowContext, artifact: str, region: str) -> str:
    await ctx.step("upload", lambda: f"{artifact} -> {region}")
    # Three levels deep: deploy > rollout > health-check, each mounted in place.
    await ctx.step("verify", lambda: ctx.spawn_workflow(health_check, region))
    return f"{region}: live"


@workflow(name="deploy")
async def deploy(ctx: WorkflowContext, version: str) -> dict[str, object]:
    built = await ctx.step("build", lambda: build.run(version))
    artifact = built.output
    outcomes: dict[str, str] = {}
    for region in ("eu-west", "us-east", "ap-south"):
        try:
            outcomes[region] = await ctx.spawn_workflow(rollout, artifact, region)
        except WorkflowError as exc:
            # The error names the failing node's path; the child's tree is kept.
            outcomes[region] = f"failed at {exc.node_path}"
    ctx.state["build_took_ms"] = round(built.duration * 1000, 1)
    return {"artifact": artifact, "regions": outcomes}


async def main() -> None:
    result = await deploy.run("2.1.0")
    print(result.tree.render())
    print(f"\noutput: {result.output}")
    nested = result.tree.find(type="workflow")
    print(f"{len(nested)} workflows in one tree, {result.tree.root.name!r} at the root")


if __name__ == "__main__":
    asyncio.run(main())
