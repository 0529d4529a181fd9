"""The package layout: where a thing happens shows in the folder names (docs/architecture.md).

The kernel is a set of packages named for its parts, each with an ``__init__``
that says what it holds; no module of the kernel or of a bundled plugin is
longer than a reader can hold in mind.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "groundswell"
#: The only modules at the top of the kernel: the public API, ``python -m groundswell``,
#: the exception hierarchy and the plugin contract.
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py", "errors.py", "hookspecs.py", "py.typed"}
MAX_LINES = 600


def test_the_top_of_the_kernel_holds_only_packages_and_its_four_modules() -> None:
    stray = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.is_file() and p.name not in TOP_LEVEL_MODULES and p.suffix in (".py", ".typed")
    )
    assert stray == [], f"put these in the package of their part (docs/architecture.md): {stray}"


def test_every_package_says_what_it_holds() -> None:
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(ROOT)} has no docstring saying what it holds"


def test_every_kernel_package_is_in_the_architecture_page() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        name = init.parent.name
        assert f"{name}/" in page, f"docs/architecture.md does not list groundswell/{name}/"


def test_no_module_of_the_kernel_or_a_bundled_plugin_is_over_600_lines() -> None:
    long = sorted(
        f"{p.relative_to(ROOT)} ({n})"
        for base in (PACKAGE, ROOT / "plugins")
        for p in base.rglob("*.py")
        if "__pycache__" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES
    )
    assert long == [], f"split these by idea: {long}"
