"""The event tree: its nodes, the events sinks receive, and how a tree is drawn.

- `node`: one node (type, status, payload, metrics) and its one-line label;
- `tree`: `EventTree`, the queryable tree of a run;
- `events`: events and their delivery to event sinks;
- `tracebacks`: the bounded, scrubbed traceback a failed node keeps;
- `_render`: drawing a tree with ``rich`` (imported only by ``render()``).

Users import these names from ``groundswell``.
"""
