"""Tools an agent can call.

- `tool`: `Tool` from Python callables, `ToolContext`, provider toolsets;
- `timeout`: the default middleware that puts a deadline on each tool call.
"""
