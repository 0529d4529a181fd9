"""The budget gauge: a prompt's budget use as a bar with a percentage and its warning state, in
the tree's metrics, in ``render()`` and in ``groundswell tree``."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from groundswell import EventTree
from groundswell.testing import FakeAnthropicAPI

from .test_budget import INSTRUCTION, Reader, budget_for, reader_agent

GAUGE = re.compile(r"budget ([█░]{10}) (\d+)% \(([\d,]+)/([\d,]+) tok\)( ⚠ .*)?$")


async def gauge_of(turns: float, **kw: Any) -> tuple[Any, re.Match[str]]:
    fake = FakeAnthropicAPI(Reader(pages=4))
    result = await reader_agent(fake, budget_for(turns, **kw)).run(INSTRUCTION)
    line = result.tree.render().splitlines()[0]
    found = GAUGE.search(line)
    assert found, line
    return result, found


async def test_the_prompt_line_draws_its_peak_input_against_the_limit_with_the_state() -> None:
    roomy, drawn = await gauge_of(20)
    stats = roomy.node.metrics["budget"]
    bar, percent, peak, limit, note = drawn.groups()
    assert (int(peak.replace(",", "")), int(limit.replace(",", ""))) == (
        stats["peak_tokens"],
        stats["limit"],
    )
    assert int(percent) == round(100 * stats["peak_tokens"] / stats["limit"])
    assert bar.count("█") == round(int(percent) / 10) and note is None
    assert (stats["state"], stats["used"]) == (
        "ok",
        round(stats["peak_tokens"] / stats["limit"], 4),
    )

    near, drawn = await gauge_of(8, warning_threshold=0.5)
    assert near.node.metrics["budget"]["state"] == "warning"
    assert drawn.group(5) == " ⚠ near the limit"
    assert any(e["type"] == "budget_warning" for e in near.node.events)

    trimmed, drawn = await gauge_of(2.5)
    stats = trimmed.node.metrics["budget"]
    assert stats["state"] == "over" and stats["enforcements"] > 0
    assert drawn.group(1) == "█" * 10 and int(drawn.group(2)) > 100
    assert drawn.group(5) == " ⚠ over the limit"


async def test_the_gauge_is_in_the_saved_tree_and_groundswell_tree_draws_it(tmp_path: Path) -> None:
    result, drawn = await gauge_of(8, warning_threshold=0.5)
    path = tmp_path / "trace.jsonl"
    result.tree.save(path)
    loaded = EventTree.load(path)
    assert loaded.root is not None and loaded.root.metrics["budget"]["state"] == "warning"
    assert GAUGE.search(loaded.render().splitlines()[0]).group(0) == drawn.group(0)  # type: ignore[union-attr]
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "groundswell.cli", "tree", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert drawn.group(0) in shown.stdout.splitlines()[0]


async def test_a_prompt_without_a_token_limit_draws_no_gauge() -> None:
    fake = FakeAnthropicAPI(Reader(pages=1))
    result = await reader_agent(fake).run(INSTRUCTION)
    assert "budget " not in result.tree.render()
