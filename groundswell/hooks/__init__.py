"""Claude Agent SDK hooks: its events, callback shape, outputs and failure rules.

- `runner`: hook configs and running the callbacks of one event;
- `middleware`, `tool_calls`: the default middleware that fires each event where it happens.
"""
