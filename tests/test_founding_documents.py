"""The founding-documents page maps every requirement to tests that exist.

``docs/founding-documents.md`` has one table per founding document. Each row
says where a requirement lives, which tests prove it, and its state: ``done``
(which must name a test) or ``different: <why>``. Every test the page names
must exist, so the map cannot drift away from the suite unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "founding-documents.md"
HEADER = ["#", "Requirement", "In Groundswell", "Test", "State"]
PREFIXES = ["PRD", "PLAN", "TOOLS", "HIST", "WL"]  # one table per document, in page order
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
DIFFERENT = re.compile(r"different: \S.{9,}")  # the why, in a few words at least


@dataclass(frozen=True)
class Row:
    line: int
    cells: list[str]

    @property
    def id(self) -> str:
        return self.cells[0]

    @property
    def test(self) -> str:
        return self.cells[3]

    @property
    def state(self) -> str:
        return self.cells[4]


def tables(text: str) -> list[list[Row]]:
    """The requirement tables of the page, each a list of rows (header and rule left out)."""
    found: list[list[Row]] = []
    current: list[Row] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("|"):
            current = None
            continue
        # No cell of the page holds a "|" of its own, so splitting on it is exact.
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells == HEADER:
            current = []
            found.append(current)
        elif current is not None and not set("".join(cells)) <= set("- :"):
            current.append(Row(number, cells))
    return found


def problems(text: str, root: Path) -> list[str]:
    """Everything wrong with the page's rows, one line each, naming the line and the row."""
    out: list[str] = []
    seen: set[str] = set()
    for table in tables(text):
        for row in table:
            where = f"line {row.line}: {row.id}"
            if len(row.cells) != len(HEADER):
                out.append(f"{where}: has {len(row.cells)} cells, not {len(HEADER)}")
                continue
            if row.id in seen:
                out.append(f"{where}: the id is used twice")
            seen.add(row.id)
            if not row.cells[1]:
                out.append(f"{where}: says no requirement")
            done = row.state == "done"
            if not done and not DIFFERENT.fullmatch(row.state):
                out.append(
                    f"{where}: state must be 'done' or 'different: <why>', not {row.state!r}"
                )
            parts = [part.strip() for part in row.test.split("<br>")]
            refs = [TEST_REF.fullmatch(part) for part in parts]
            if done and parts == ["pending"]:
                out.append(f"{where}: is done but its test is still pending")
            elif done and not any(refs):
                out.append(f"{where}: is done but names no test")
            for part, ref in zip(parts, refs, strict=True):
                if ref is None:
                    if part not in ("pending", "—"):
                        out.append(f"{where}: {part!r} is not `tests/<file>.py::test_<name>`")
                    continue
                path, name = ref.groups()
                file = root / path
                if not file.is_file():
                    out.append(f"{where}: {path} does not exist")
                elif not re.search(rf"^\s*(async )?def {name}\(", file.read_text(), re.M):
                    out.append(f"{where}: {path} has no test named {name}")
    return out


def test_every_requirement_on_the_page_is_proved_by_a_test_that_exists() -> None:
    found = problems(PAGE.read_text(encoding="utf-8"), ROOT)
    assert not found, "docs/founding-documents.md:\n" + "\n".join(found)


def test_the_page_has_a_table_for_each_founding_document_and_is_reachable() -> None:
    found = tables(PAGE.read_text(encoding="utf-8"))
    assert [table[0].id.split("-")[0] for table in found] == PREFIXES
    for table, prefix in zip(found, PREFIXES, strict=True):
        assert [row.id for row in table] == [f"{prefix}-{i}" for i in range(1, len(table) + 1)]
    states = [row.state.split(":")[0] for table in found for row in table]
    assert len(states) >= 200 and states.count("different") >= 18
    assert "founding-documents.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "(founding-documents.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


def test_a_map_that_drifts_from_the_suite_is_caught(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text(
        "def test_here() -> None:\n    pass\n\n\nasync def test_async_here() -> None:\n    pass\n"
    )
    page = "\n".join(
        [
            "Intro text.",
            "",
            "| # | Requirement | In Groundswell | Test | State |",
            "| --- | --- | --- | --- | --- |",
            "| X-1 | Fine | `a` | `tests/test_real.py::test_here`<br>`tests/test_real.py::test_async_here` | done |",
            "| X-2 | Renamed test | `a` | `tests/test_real.py::test_gone` | done |",
            "| X-3 | Missing file | `a` | `tests/test_nowhere.py::test_here` | done |",
            "| X-4 | Not built yet | `a` | pending | done |",
            "| X-5 | No test | `a` | — | done |",
            "| X-6 | On purpose | `a` | — | different: because Python names things so |",
            "| X-6 | Twice | `a` | — | different |",
            "| X-8 | Bad reference | `a` | tests/test_real.py::test_here | maybe |",
        ]
    )
    assert problems(page, tmp_path) == [
        "line 6: X-2: tests/test_real.py has no test named test_gone",
        "line 7: X-3: tests/test_nowhere.py does not exist",
        "line 8: X-4: is done but its test is still pending",
        "line 9: X-5: is done but names no test",
        "line 11: X-6: the id is used twice",
        "line 11: X-6: state must be 'done' or 'different: <why>', not 'different'",
        "line 12: X-8: state must be 'done' or 'different: <why>', not 'maybe'",
        "line 12: X-8: 'tests/test_real.py::test_here' is not `tests/<file>.py::test_<name>`",
    ]
