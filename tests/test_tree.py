"""The event tree: queries, traversal, serialization, and very large or deep trees."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from groundswell import EventNode, EventTree, NodeStatus, NodeType


def small_tree() -> tuple[EventTree, dict[str, EventNode]]:
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "root")
    a = tree.start_node(NodeType.STEP, "a", root)
    b = tree.start_node(NodeType.STEP, "b", root)
    a1 = tree.start_node(NodeType.PROMPT, "a1", a)
    a2 = tree.start_node(NodeType.TOOL_CALL, "a2", a)
    tree.end_node(a1, NodeStatus.COMPLETED, output={"x": 1}, record_output=True)
    tree.end_node(a2, NodeStatus.FAILED, error=ValueError("bad input"))
    tree.add_event(b, "cache_hit", key="k:1", age_s=2.5)
    return tree, {"root": root, "a": a, "b": b, "a1": a1, "a2": a2}


def test_enums_compare_equal_to_their_values() -> None:
    assert NodeType.STEP == "step"
    assert NodeStatus.REVISED == "revised"
    assert {t.value for t in NodeType} == {
        "workflow", "step", "prompt", "model_call", "tool_call", "mcp_call",
        "mcp_connect", "reflection", "spawn", "budget", "extraction", "summary", "wait",
    }  # fmt: skip
    assert {s.value for s in NodeStatus} == {
        "pending", "running", "completed", "failed", "cancelled", "revised", "waiting",
    }  # fmt: skip


def test_lookups_children_and_ancestors() -> None:
    tree, n = small_tree()
    assert tree.get_node(n["a1"].id) is n["a1"]
    assert [c.name for c in tree.get_children(n["root"].id)] == ["a", "b"]
    assert [c.name for c in tree.get_children(n["a"].id)] == ["a1", "a2"]
    assert [x.name for x in tree.get_ancestors(n["a2"].id)] == ["a", "root"]
    assert tree.get_ancestors(n["root"].id) == []
    assert tree.path(n["a2"].id) == "root/a/a2"
    with pytest.raises(KeyError, match="no node with id 'nope'"):
        tree.get_node("nope")


def test_walk_is_depth_first_preorder_and_find_filters() -> None:
    tree, n = small_tree()
    assert [x.name for x in tree.walk()] == ["root", "a", "a1", "a2", "b"]
    assert [x.name for x in tree.walk(n["a"].id)] == ["a", "a1", "a2"]
    assert [x.name for x in tree.find(type="step")] == ["a", "b"]
    assert [x.name for x in tree.find(status=NodeStatus.FAILED)] == ["a2"]
    assert tree.find(type="step", name="b") == [n["b"]]
    with pytest.raises(TypeError, match="unknown attribute"):
        tree.find(colour="red")


def test_failed_node_keeps_error_and_events_record_data() -> None:
    _, n = small_tree()
    assert n["a2"].error == {"type": "ValueError", "message": "bad input"}
    assert n["a1"].payload["output"] == {"x": 1}
    assert n["a1"].duration is not None and n["a1"].duration >= 0
    (event,) = n["b"].events
    assert event["type"] == "cache_hit" and event["key"] == "k:1" and event["age_s"] == 2.5


def test_json_round_trip_is_flat_and_equal() -> None:
    tree, _ = small_tree()
    data = tree.to_json()
    assert data["version"] == 1 and data["root_id"] == tree.root.id  # type: ignore[union-attr]
    assert [d["name"] for d in data["nodes"]] == ["root", "a", "a1", "a2", "b"]
    assert data["nodes"][1]["children"] == [d["id"] for d in data["nodes"][2:4]]
    rebuilt = EventTree.from_json(json.loads(json.dumps(data)))
    assert rebuilt == tree
    assert rebuilt.to_json() == data


def test_scrub_replaces_registered_secrets_in_text_of_any_length() -> None:
    from groundswell import register_secret, scrub

    register_secret("sk-scrub-test-91b2")
    text = "x" * 50_000 + " key=sk-scrub-test-91b2"
    assert scrub(text) == "x" * 50_000 + " key=**********"  # nothing cut, nothing else changed
    assert scrub("no secret here") == "no secret here"


def test_a_subtree_serialized_alone_rebuilds_as_a_tree_of_its_own() -> None:
    tree, n = small_tree()
    part = EventTree.from_json(tree.to_json(start=n["a"].id))
    assert [x.name for x in part.walk()] == ["a", "a1", "a2"]
    assert part.root is not None and part.root.parent_id is None
    assert part.get_node(n["a2"].id).error == {"type": "ValueError", "message": "bad input"}


def test_jsonl_event_log_replays_into_an_equal_tree(tmp_path: Path) -> None:
    tree, _ = small_tree()
    path = tree.save(tmp_path / "run.jsonl")
    lines = path.read_text().splitlines()
    assert {json.loads(line)["kind"] for line in lines} == {"node_start", "node_end", "node_event"}
    assert EventTree.load(path) == tree


def test_from_json_rejects_foreign_data_clearly() -> None:
    with pytest.raises(ValueError, match="not a Groundswell tree"):
        EventTree.from_json({"nodes": []})
    with pytest.raises(ValueError, match="unknown kind 'oops'"):
        EventTree.replay([{"kind": "oops", "data": {}}])


def test_second_root_is_refused() -> None:
    tree = EventTree()
    tree.start_node("workflow", "one")
    with pytest.raises(ValueError, match="already has root"):
        tree.start_node("workflow", "two")


def test_ten_thousand_deep_tree_with_default_recursion_limit(tmp_path: Path) -> None:
    assert sys.getrecursionlimit() <= 10_000
    tree = EventTree()
    node = tree.start_node(NodeType.WORKFLOW, "n0")
    for i in range(1, 10_000):
        node = tree.start_node(NodeType.STEP, f"n{i}", node)
    deepest = node
    assert len(tree.get_ancestors(deepest.id)) == 9_999
    assert sum(1 for _ in tree.walk()) == 10_000
    assert EventTree.from_json(tree.to_json()) == tree
    assert EventTree.load(tree.save(tmp_path / "deep.jsonl")) == tree
    assert tree.render().count("\n") == 9_999


@pytest.mark.slow
def test_hundred_thousand_node_tree_round_trips() -> None:
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "root")
    for i in range(1_000):
        step = tree.start_node(NodeType.STEP, f"s{i}", root)
        for j in range(99):
            leaf = tree.start_node(NodeType.TOOL_CALL, f"t{j}", step)
            tree.end_node(leaf, NodeStatus.COMPLETED)
        tree.end_node(step, NodeStatus.COMPLETED)
    assert len(tree) == 100_001
    assert len(tree.find(type="step")) == 1_000
    data = tree.to_json()
    assert len(data["nodes"]) == 100_001
    assert EventTree.from_json(data) == tree


def test_render_shows_status_duration_and_errors() -> None:
    tree, _ = small_tree()
    text = tree.render()
    assert text.splitlines()[0].startswith("… workflow root")
    assert "✗ tool_call a2" in text and "ValueError: bad input" in text
    assert "└── " in text and "├── " in text


def two_runs_interleaved() -> list[dict[str, object]]:
    one, _ = small_tree()
    two = EventTree()
    two.start_node(NodeType.WORKFLOW, "other")
    a, b = [e.to_record() for e in one.events()], [e.to_record() for e in two.events()]
    return [a[0], b[0], *a[1:], *b[1:]]


def test_interleaved_runs_replay_into_separate_trees(tmp_path: Path) -> None:
    records = two_runs_interleaved()
    trees = EventTree.replay_all(records)
    assert [t.root.name for t in trees] == ["root", "other"]  # type: ignore[union-attr]
    assert trees[0] == small_tree()[0].__class__.from_json(trees[0].to_json())
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert len(EventTree.load_all(path)) == 2
    with pytest.raises(ValueError, match=r"holds 2 runs .*use EventTree.load_all"):
        EventTree.load(path)


def test_log_cut_mid_line_loads_what_was_written(tmp_path: Path) -> None:
    tree, _ = small_tree()
    path = tree.save(tmp_path / "run.jsonl")
    path.write_text(path.read_text() + '{"kind": "node_st')
    assert EventTree.load(path) == tree
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", *lines[1:]]))
    with pytest.raises(ValueError, match=r"line 2: not JSON"):
        EventTree.load(path)


def test_replay_errors_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="event 1: expected an object"):
        EventTree.replay([["not", "an", "object"]])  # type: ignore[list-item]
    orphan = {"kind": "node_start", "data": {"id": "x", "type": "step", "name": "s",
                                              "timestamp": 0, "parent_id": "gone"}}  # fmt: skip
    with pytest.raises(ValueError, match="names parent 'gone', which is not in the log"):
        EventTree.replay([orphan])


def test_print_writes_exactly_the_render_lines_at_any_depth_and_width() -> None:
    tree = EventTree()
    parent = None
    for i in range(40):  # deeper than rich's own tree widget draws
        parent = tree.start_node(NodeType.STEP, f"step-{i}-" + "x" * 30, parent)
    out = io.StringIO()
    tree.print(file=out)
    assert out.getvalue().rstrip("\n") == tree.render()
    assert len(out.getvalue().splitlines()) == 40
