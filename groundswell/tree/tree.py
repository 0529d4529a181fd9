"""The event tree: every workflow, step, prompt and tool call of a run, as nodes.

The nodes themselves (`EventNode`, its types and statuses) are in ``node``.
They are kept in a dict (O(1) lookup) and linked parent → children in start
order. Every traversal here is iterative, so a 10,000-deep tree never meets the
recursion limit. The tree can be serialized flat (``to_json``) or as a replayable
JSONL event log (``save`` / ``load``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..scrubbing.scrubber import scrub_fields, scrub_json
from ..scrubbing.serialize import jsonable, jsonable_text
from .events import Event
from .labels import label

# The ``x as x`` import keeps ``groundswell.tree.tree.FINAL_STATUSES`` importable.
from .node import FINAL_STATUSES as FINAL_STATUSES
from .node import (
    NODE_FIELDS,
    EventNode,
    NodeStatus,
    NodeType,
    child_nodes,
    finish,
    metrics_of,
    new_node,
    reading_whole_tree,
    recorded_events,
)
from .records import (
    end_record,
    node_from_record,
    record_error,
    record_field,
    record_status,
    start_record,
)
from .tracebacks import failure_record

__all__ = ["EventNode", "EventTree", "NodeStatus", "NodeType", "Replayer"]

FORMAT_VERSION = 1
# What users' code fills in; the rest of a node's record (ids, type, status,
# times, child ids) the tree writes itself, so only these need scrubbing.
_FREE_FIELDS = ("name", "payload", "metrics", "events", "error")
#: What ends a node ``cancelled`` rather than ``failed`` (`EventTree.end_node_after`).
CANCELLATIONS = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)


class EventTree:
    """A queryable tree of `EventNode`; one per top-level run.

    Build it by running workflows and agents; query it with `get_node`,
    `get_children`, `get_ancestors`, `find` and `walk`.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, EventNode] = {}
        self.root: EventNode | None = None
        # Set by the run that owns the tree so event sinks see every change.
        self._dispatch: Callable[[Event], None] | None = None

    def dispatch_to(self, deliver: Callable[[Event], None] | None) -> None:
        """Send every later change of this tree to ``deliver`` (e.g. the event sinks' hub)."""
        self._dispatch = deliver

    @property
    def delivery(self) -> Callable[[Event], None] | None:
        """What changes of this tree are sent to (`dispatch_to`), or None."""
        return self._dispatch

    @property
    def observed(self) -> bool:
        """True when changes of this tree reach event sinks."""
        return self._dispatch is not None

    # -- building ---------------------------------------------------------------

    def start_node(
        self,
        type: NodeType | str,
        name: str,
        parent: EventNode | None = None,
        *,
        payload: dict[str, Any] | None = None,
        trusted: bool = False,
        id: str | None = None,
    ) -> EventNode:
        """Add a running node under ``parent`` (the root when ``parent`` is None).

        ``payload`` is recorded JSON-safe, with secrets scrubbed; ``trusted=True``
        skips that for payloads the caller built from plain, secret-free values.
        ``id`` gives the node that id (one not yet in the tree) instead of a fresh one.
        """
        if payload and not trusted:
            payload = jsonable(payload)
        if id is not None and id in self._nodes:
            raise ValueError(f"node id {id!r} is already in this tree")
        node = new_node(type, name, parent.id if parent else None, payload, id)
        nodes = self._nodes
        if parent is not None and parent.id in nodes:  # `_attach`, inline for the usual case
            parent.children.append(node)
            nodes[node.id] = node
        else:
            self._attach(node, parent)
        if self._dispatch is not None:
            self._dispatch(Event("node_start", node, start_record(node), self._run_id()))
        return node

    def _run_id(self) -> str:
        return self.root.id if self.root is not None else ""

    def _attach(self, node: EventNode, parent: EventNode | None) -> None:
        # dict assignment and list.append are atomic under the GIL, which is all the
        # locking needed when sync steps in worker threads add nodes concurrently.
        if parent is None:
            if self.root is not None:
                raise ValueError(
                    f"tree already has root {self.root.name!r}; give a parent for {node.name!r}"
                )
            self.root = node
        else:
            if parent.id not in self._nodes:
                raise KeyError(f"parent node {parent.id!r} is not in this tree")
            parent.children.append(node)
        self._nodes[node.id] = node

    def end_node(
        self,
        node: EventNode,
        status: NodeStatus | str,
        *,
        error: BaseException | None = None,
        output: Any = None,
        record_output: bool = False,
    ) -> None:
        """Finish ``node`` with a final status, its duration, and its output or error."""
        final = status if status.__class__ is NodeStatus else NodeStatus(status)
        # Fill every field first and flip the status last (`finish`), so nobody sees
        # a "completed" node without its output.
        if error is not None:
            # The traceback is read here, on failure only: completing costs nothing more.
            node.error = failure_record(error)
        if record_output:
            kind = output.__class__
            # Numbers and None are JSON already and hold no secret (strings may: they
            # go through jsonable like everything else).
            if kind is str:
                output = jsonable_text(output)
            elif not (kind is int or kind is bool or output is None):
                output = jsonable(output)
        finish(node, final, output, record_output)
        if self._dispatch is not None:
            self._dispatch(Event("node_end", node, end_record(node), self._run_id()))

    def end_node_after(self, node: EventNode, exc: BaseException) -> None:
        """Finish ``node`` after ``exc``: ``cancelled`` for a cancellation, else ``failed``.

        A Ctrl-C (``KeyboardInterrupt``) and a coroutine closed before it finished
        (``GeneratorExit``) cancel the node too.
        """
        if isinstance(exc, CANCELLATIONS):
            self.end_node(node, NodeStatus.CANCELLED)
        else:
            self.end_node(node, NodeStatus.FAILED, error=exc)

    def add_event(self, node: EventNode, type: str, /, **data: Any) -> dict[str, Any]:
        """Record a point-in-time happening on ``node`` (data is made JSON-safe).

        The event is ``{"type": type, "timestamp": now, **data}``; ``type`` and
        ``timestamp`` are therefore reserved and cannot be data keys.
        """
        if "type" in data or "timestamp" in data:
            clash = sorted({"type", "timestamp"} & data.keys())
            raise ValueError(f"event data cannot use the reserved key(s) {clash}")
        event = {"type": type, "timestamp": time.time(), **jsonable(data)}
        node.events.append(event)
        if self._dispatch is not None:
            record = {"id": node.id, "event": event}
            self._dispatch(Event("node_event", node, record, self._run_id()))
        return event

    def set_status(self, node: EventNode, status: NodeStatus | str) -> None:
        """Change a finished node's status (e.g. to ``revised``) and tell the sinks."""
        node.status = NodeStatus(status)
        if self._dispatch is not None:
            self._dispatch(Event("node_end", node, end_record(node), self._run_id()))

    # -- queries -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get_node(self, node_id: str) -> EventNode:
        """The node with this id; ``KeyError`` if there is none."""
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"no node with id {node_id!r} in this tree") from None

    def get_children(self, node_id: str) -> list[EventNode]:
        """The node's children, in start order."""
        return self.get_node(node_id).children

    def get_ancestors(self, node_id: str) -> list[EventNode]:
        """The node's ancestors: parent first, root last."""
        out: list[EventNode] = []
        parent_id = self.get_node(node_id).parent_id
        nodes = self._nodes
        while parent_id is not None:
            parent = nodes[parent_id]
            out.append(parent)
            parent_id = parent.parent_id
        return out

    def path(self, node_id: str) -> str:
        """The node's names from the root down, joined by ``/`` (``"review/judge"``)."""
        names = [self.get_node(node_id).name]
        names.extend(a.name for a in self.get_ancestors(node_id))
        return "/".join(reversed(names))

    def walk(self, start: str | None = None) -> Iterator[EventNode]:
        """Yield nodes depth-first, pre-order, from ``start`` (default: the root)."""
        if start is None:
            if self.root is None:
                return
            stack = [self.root]
        else:
            stack = [self.get_node(start)]
        while stack:
            node = stack.pop()
            yield node
            kids = child_nodes(node)
            if kids:
                stack.extend(reversed(kids))

    def find(self, **attrs: Any) -> list[EventNode]:
        """Nodes whose attributes equal every given value, in walk order.

        ``tree.find(type="step", status="failed")``; an unknown attribute name is a
        ``TypeError``.
        """
        unknown = set(attrs) - set(NODE_FIELDS)
        if unknown:
            raise TypeError(
                f"find() got unknown attribute(s) {sorted(unknown)}; use any of {list(NODE_FIELDS)}"
            )
        items = list(attrs.items())
        return [n for n in self.walk() if all(getattr(n, k) == v for k, v in items)]

    # -- serialization -----------------------------------------------------------

    def to_json(self, *, start: str | None = None) -> dict[str, Any]:
        """The tree as ``{"version": 1, "root_id": ..., "nodes": [...]}``, nodes in pre-order.

        ``start`` serializes only the subtree under that node (it becomes ``root_id``).
        Secrets are scrubbed (``groundswell.scrub``), like every output of a run.
        """
        root_id = start if start is not None else (self.root.id if self.root else None)
        with reading_whole_tree():
            nodes = [n.to_dict() for n in self.walk(start)]
        return {
            "version": FORMAT_VERSION,
            "root_id": root_id,
            "nodes": scrub_fields(nodes, _FREE_FIELDS),
        }

    def mount(self, data: dict[str, Any], parent: EventNode) -> EventNode:
        """Attach a tree recorded elsewhere (`to_json` output) under ``parent``; return its root.

        For work that ran in another process or an earlier attempt (a queued
        child run, a step recovered from a checkpoint). Event sinks see every
        mounted node start and end, as if it had just run here.
        """
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"not a Groundswell tree (expected a dict with version {FORMAT_VERSION}); "
                "pass the output of EventTree.to_json()"
            )
        if parent.id not in self._nodes:
            raise KeyError(f"parent node {parent.id!r} is not in this tree")
        nodes = [node_from_record(record) for record in data["nodes"]]
        if not nodes:
            raise ValueError("the recorded tree has no nodes")
        clash = [n.id for n in nodes if n.id in self._nodes]
        if clash:
            raise ValueError(f"node id {clash[0]!r} is already in this tree; it was mounted before")
        by_id: dict[str, EventNode] = {}
        for i, node in enumerate(nodes):
            if i == 0:
                node.parent_id = parent.id
                above = parent
            else:
                found = by_id.get(node.parent_id or "")
                if found is None:
                    raise ValueError(
                        f"node {node.id!r} appears before its parent {node.parent_id!r}"
                    )
                above = found
            by_id[node.id] = node
            self._attach(node, above)
        # What the mounted model calls cost counts in the prompts, steps and workflows
        # above as their metrics are read (`node.metrics_of` adds up what is below).
        if self._dispatch is not None:
            run_id = self._run_id()
            for node in nodes:
                start = start_record(node)
                start.update(status=NodeStatus.RUNNING.value, ended_at=None, metrics={}, error=None)
                self._dispatch(Event("node_start", node, start, run_id))
            for node in reversed(nodes):
                if node.status is not NodeStatus.RUNNING:
                    self._dispatch(Event("node_end", node, end_record(node), run_id))
        return nodes[0]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EventTree:
        """Rebuild a tree from `to_json` output."""
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"not a Groundswell tree (expected a dict with version {FORMAT_VERSION}); "
                "pass the output of EventTree.to_json()"
            )
        nodes = data.get("nodes")
        if not isinstance(nodes, list):
            raise ValueError(f"a tree needs a 'nodes' list, got {nodes!r:.40}")
        tree = cls()
        root_id = data.get("root_id")
        for record in nodes:
            node = node_from_record(record)
            if node.id in tree._nodes:
                raise ValueError(f"node id {node.id!r} appears twice; node ids must be unique")
            if node.id == root_id:
                # A subtree (``to_json(start=...)``): its top node becomes the root.
                node.parent_id = None
            parent = tree._nodes.get(node.parent_id) if node.parent_id else None
            if node.parent_id and parent is None:
                raise ValueError(f"node {node.id!r} appears before its parent {node.parent_id!r}")
            if parent is None and tree.root is not None:
                raise ValueError(f"node {node.id!r} has no parent, but the tree has a root already")
            tree._attach(node, parent)
        return tree

    def events(self) -> Iterator[Event]:
        """Replayable events that rebuild this tree: starts in pre-order, then ends bottom-up.

        Their data is scrubbed of secrets, like every output of a run.
        """
        run_id = self._run_id()
        nodes = list(self.walk())
        for node in nodes:
            start = start_record(node)
            start.update(status=NodeStatus.RUNNING.value, ended_at=None, metrics={}, error=None)
            start["events"] = []
            yield Event("node_start", node, scrub_fields([start], _FREE_FIELDS)[0], run_id)
            for event in recorded_events(node):
                data = {"id": node.id, "event": event}
                yield Event("node_event", node, scrub_json(data), run_id)
        for node in reversed(nodes):
            if node.status is not NodeStatus.RUNNING or metrics_of(node) or node.error:
                yield Event("node_end", node, scrub_json(end_record(node)), run_id)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tree as a JSONL event log that `load` replays (secrets scrubbed).

        Missing parent folders are created.
        """
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as f, reading_whole_tree():
            for event in self.events():
                f.write(json.dumps(event.to_record(), separators=(",", ":")) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EventTree:
        """Replay a JSONL event log (from `save` or an event sink) into a tree.

        A log holding several runs is an error; use `load_all` for those.
        """
        trees = cls.load_all(path)
        if not trees:
            raise ValueError(f"{path} holds no run: the log has no node_start event")
        if len(trees) != 1:
            names = [t.root.name for t in trees if t.root is not None]
            raise ValueError(
                f"{path} holds {len(trees)} runs ({names[:5]}); use EventTree.load_all()"
            )
        return trees[0]

    @classmethod
    def load_all(cls, path: str | os.PathLike[str]) -> list[EventTree]:
        """Replay a JSONL event log into one tree per run, in the order the runs started.

        A last line cut short (a writer that crashed mid-line: the start of a
        record) is ignored; any other line that is not JSON is a `ValueError`
        naming the file and line.
        """
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        records: list[Any] = []
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if lineno == len(lines) and line.lstrip().startswith("{"):
                    break
                raise ValueError(
                    f"{path}, line {lineno}: not JSON ({exc.msg}); an event log has one JSON "
                    "event record per line"
                ) from exc
            except RecursionError:
                raise ValueError(f"{path}, line {lineno}: JSON nested too deeply to read") from None
        return cls.replay_all(records)

    @classmethod
    def replay(cls, records: Iterable[dict[str, Any]]) -> EventTree:
        """Rebuild one run's tree from event records (``{"kind": ..., "data": ...}``)."""
        trees = cls.replay_all(records)
        if len(trees) != 1:
            raise ValueError(f"the events hold {len(trees)} runs; use EventTree.replay_all()")
        return trees[0]

    @classmethod
    def replay_all(cls, records: Iterable[dict[str, Any]]) -> list[EventTree]:
        """Rebuild every run's tree from interleaved event records, in start order."""
        replayer = Replayer()
        for record in records:
            replayer.apply(record)
        return replayer.trees

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventTree):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    # -- display -----------------------------------------------------------------

    def render(self, *, start: str | None = None) -> str:
        """The tree as indented text: status mark, type, name, duration, attempts, tokens, cache.

        Plain text for logs and tests; `print` (or ``rich.print(tree)``)
        draws the same lines in colour.
        """
        if self.root is None and start is None:
            return "(empty tree)"
        first = self.get_node(start) if start else self.root
        assert first is not None
        with reading_whole_tree():
            lines = [lead + label(node) for lead, node in self.guided(first)]
        return "\n".join(lines)

    @staticmethod
    def guided(first: EventNode) -> Iterator[tuple[str, EventNode]]:
        """``(guide, node)`` pairs in walk order, the guide being the ``├── `` prefix
        drawn before the node's line (iterative: any depth)."""
        stack: list[tuple[EventNode, str, str]] = [(first, "", "")]
        while stack:
            node, lead, child_lead = stack.pop()
            yield lead, node
            kids = child_nodes(node)
            for i in range(len(kids) - 1, -1, -1):
                last = i == len(kids) - 1
                stack.append(
                    (
                        kids[i],
                        child_lead + ("└── " if last else "├── "),
                        child_lead + ("    " if last else "│   "),
                    )
                )

    def __rich__(self) -> Any:
        """A coloured ``rich`` tree: ``rich.print(result.tree)``."""
        from ._render import rich_tree  # rich loads only when a tree is drawn

        return rich_tree(self)

    def print(self, *, file: Any = None) -> None:
        """Draw the tree on the terminal (colours when it is one; plain text when piped)."""
        from ._render import print_tree

        print_tree(self, file=file)

    def __gs_jsonable__(self) -> dict[str, Any]:
        return {
            "run_id": self._run_id(),
            "root": self.root.name if self.root else None,
            "nodes": len(self),
        }

    def __repr__(self) -> str:
        root = self.root.name if self.root else None
        return f"EventTree(root={root!r}, nodes={len(self._nodes)})"


class Replayer:
    """Builds trees from event records one at a time (a live view, a log being read).

    ``apply(record)`` takes one ``{"kind", "data"}`` record (an `Event`'s
    `to_record`); ``trees`` holds one tree per run, in start order.
    """

    def __init__(self) -> None:
        self.trees: list[EventTree] = []
        self._owner: dict[str, EventTree] = {}
        self._count = 0

    def apply(self, record: dict[str, Any]) -> EventTree:
        """Apply one record; returns the tree it changed. ``ValueError`` if it does not fit."""
        self._count += 1
        n = self._count
        if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
            raise ValueError(f"event {n}: expected an object with 'kind' and a 'data' object")
        kind, data = record.get("kind"), record["data"]
        if kind == "node_start":
            node = node_from_record(data)
            if node.id in self._owner:
                raise ValueError(
                    f"event {n}: node {node.id!r} starts a second time; node ids must be unique"
                )
            parent_id = data.get("parent_id")
            if parent_id:
                tree = self._owner.get(parent_id)
                if tree is None:
                    raise ValueError(
                        f"event {n}: node {node.name!r} names parent {parent_id!r}, which "
                        "is not in the log (was the start of the log cut off?)"
                    )
                tree._attach(node, tree._nodes[parent_id])
            else:
                tree = EventTree()
                tree._attach(node, None)
                self.trees.append(tree)
            self._owner[node.id] = tree
            return tree
        if kind in ("node_end", "node_event"):
            node_id = data.get("id")
            tree = self._owner.get(node_id) if isinstance(node_id, str) else None
            if tree is None or not isinstance(node_id, str):
                raise ValueError(f"event {n}: {kind} for unknown node {node_id!r}")
            node = tree._nodes[node_id]
            try:
                if kind == "node_event":
                    node.events.append(record_field(data, "event", dict, required=True))
                else:
                    node.status = record_status(data.get("status"))
                    node.ended_at = record_field(data, "ended_at", (int, float))
                    node.metrics = dict(record_field(data, "metrics", dict) or {})
                    node.payload = dict(record_field(data, "payload", dict) or {})
                    node.error = record_error(data)
            except ValueError as exc:
                raise ValueError(f"event {n}: {kind} of node {node_id!r}: {exc}") from None
            return tree
        raise ValueError(
            f"event {n}: unknown kind {kind!r} (expected node_start, node_end or node_event)"
        )
