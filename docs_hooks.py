"""MkDocs hooks: the examples page is built by running every example.

``docs/examples.md`` holds the marker ``<!-- examples -->``; each example's
docstring, source and the output of running it offline replace it, so the
published page always shows what the code really prints. An example that
fails fails the build.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent
EXAMPLES = ROOT / "examples"
MARKER = "<!-- examples -->"


def _run(path: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    out = subprocess.run(
        [sys.executable, str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise PluginError(f"example {path.name} failed while building the docs:\n{out.stderr}")
    return out.stdout


def _section(path: Path, output: str) -> str:
    source = path.read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(source)) or ""
    title, _, rest = doc.partition("\n")
    heading = title.partition(": ")[2].rstrip(".") or path.stem
    return (
        f"## {path.stem[:2]} · {heading} {{#{path.stem}}}\n\n"
        f"{rest.strip()}\n\n"
        f"`python examples/{path.name}` prints (run offline while these docs were built):\n\n"
        f"```text\n{output.rstrip()}\n```\n\n"
        f'??? example "Source of {path.name}"\n\n'
        + "".join(
            f"    {line}\n" if line else "\n"
            for line in ["```python", *source.rstrip().splitlines(), "```"]
        )
        + "\n"
    )


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the examples marker with every example and its real output."""
    if MARKER not in markdown:
        return markdown
    paths = sorted(EXAMPLES.glob("[0-9][0-9]_*.py"))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        outputs = list(pool.map(_run, paths))
    return markdown.replace(
        MARKER, "\n".join(_section(p, o) for p, o in zip(paths, outputs, strict=True))
    )
