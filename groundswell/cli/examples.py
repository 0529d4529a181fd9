"""Finding and running the canonical examples (``groundswell examples``).

The examples ship inside the wheel as ``groundswell/examples``; in a source
checkout they are the repository's ``examples/`` folder.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Example", "examples_dir", "find_examples"]

PATTERN = "[0-9][0-9]_*.py"


@dataclass(frozen=True)
class Example:
    """One runnable example script."""

    number: int
    name: str
    path: Path
    title: str

    def run(self) -> int:
        """Run the script as ``python path`` in its own folder, as a user would; its exit code.

        On POSIX the script gets its own process group: Ctrl-C reaches only the
        caller, which stops the script quietly (no second traceback from it).
        """
        with subprocess.Popen(
            [sys.executable, str(self.path)],
            cwd=self.path.parent,
            process_group=0 if os.name == "posix" else None,
        ) as process:
            try:
                return process.wait()
            except BaseException:  # Ctrl-C: stop the script, and reap it, before going on
                process.kill()
                process.wait()
                raise


def examples_dir() -> Path | None:
    """Where the examples are: ``GROUNDSWELL_EXAMPLES_DIR``, the wheel's copy, or the checkout's."""
    override = os.environ.get("GROUNDSWELL_EXAMPLES_DIR")
    here = Path(__file__).resolve().parent.parent  # the groundswell package
    candidates = [Path(override)] if override else [here / "examples", here.parent / "examples"]
    for folder in candidates:
        if any(folder.glob(PATTERN)):
            return folder
    return None


def _title(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    # "Example 3: one agent used across many workflows." -> the part after the colon.
    return first.partition(": ")[2].rstrip(".") if ": " in first else first.rstrip(".")


def find_examples() -> list[Example]:
    """Every example script, in number order (empty when none are installed)."""
    folder = examples_dir()
    if folder is None:
        return []
    return [
        Example(number=int(p.name[:2]), name=p.stem, path=p, title=_title(p))
        for p in sorted(folder.glob(PATTERN))
    ]
