"""Where a run is: the current tree and node on contextvars, and running from sync code.

- `context`: the current `Frame` (tree, node, workflow, agent) and mounting;
- `blocking`: ``run_sync`` for scripts and notebooks.
"""
