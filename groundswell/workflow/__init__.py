"""Workflows and steps.

- `workflow`: ``@workflow``, `Workflow` and its run, `WorkflowContext`;
- `steps`: ``ctx.step``: each attempt a ``step`` node, and state snapshots;
- `inputs`, `options`: a workflow's arguments (schema, checks) and its options;
- `step_body`: running a step's body under its timeout;
- `outcomes`: `WorkflowResult`, or the `WorkflowError` naming where it failed;
- `revision`: ``ctx.replace_last_prompt_result``;
- `execution`: the seam where workflows and steps run (the engine a durable backend replaces).
"""
