"""The event tree: its nodes, the events sinks receive, and how a tree is drawn.

- `node`: one node (type, status, payload, metrics);
- `records`: a node's JSON records (the event log's dicts) and a node read back from one;
- `labels`: a node's one-line label, as ``render()`` and the renderer draw it;
- `tree`: `EventTree`, the queryable tree of a run;
- `events`: events and their delivery to event sinks;
- `tracebacks`: the bounded, scrubbed traceback a failed node keeps;
- `_render`: drawing a tree with ``rich`` (imported only by ``render()``).

Users import these names from ``groundswell``.
"""
