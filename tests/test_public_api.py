"""The public surface: __all__ is complete and sorted; the kernel never imports plugins."""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import groundswell

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "groundswell"
BUNDLED = {p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists()}


def test_all_is_sorted_and_names_every_public_object() -> None:
    assert groundswell.__all__ == sorted(groundswell.__all__)
    for name in groundswell.__all__:  # resolves the lazily imported names too
        getattr(groundswell, name)
    public = {
        name
        for name, value in vars(groundswell).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    public -= {"annotations", "TYPE_CHECKING", "Any"}
    assert public | {"__version__"} == set(groundswell.__all__)
    for name in groundswell.__all__:
        assert hasattr(groundswell, name), name


def test_every_public_name_has_a_docstring() -> None:
    aliases = _documented_aliases(KERNEL / "agent" / "middleware.py")
    for name in groundswell.__all__:
        obj = getattr(groundswell, name)
        if isinstance(obj, types.GenericAlias | type(typing.Callable[[], None])):
            # A type alias holds no docstring of its own: the string after it documents it.
            assert name in aliases, f"{name} is a type alias with no docstring after it"
        elif callable(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def _documented_aliases(path: Path) -> set[str]:
    """Names assigned at the top of ``path`` and followed by a string (their docstring)."""
    body = ast.parse(path.read_text()).body
    return {
        target.id
        for node, after in itertools.pairwise(body)
        if isinstance(node, ast.Assign)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_kernel_source_never_imports_a_bundled_plugin() -> None:
    assert "groundswell_lru" in BUNDLED
    offenders = []
    for path in KERNEL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in BUNDLED]
    assert offenders == []


def test_running_a_workflow_with_plugins_off_imports_no_plugin() -> None:
    code = (
        "import asyncio, sys, groundswell\n"
        "@groundswell.workflow\n"
        "async def w(ctx):\n"
        "    return await ctx.step('s', lambda: 1)\n"
        "assert asyncio.run(w.run()).output == 1\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(BUNDLED)!r}))\n"
    )
    env = {**os.environ, "GROUNDSWELL_LOAD_PLUGINS": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_kernel_imports_only_its_allowed_dependencies() -> None:
    # httpx2 is anthropic's own transport; genai_prices the price table (imported lazily);
    # rich only where trees are drawn for people (the CLI and the renderer); yaml reads
    # skills' front matter.
    allowed = {
        "anthropic",
        "httpx2",
        "pydantic",
        "pluggy",
        "mcp",
        "orjson",
        "genai_prices",
        "yaml",
        # groundswell.agui's event models, imported only when an AG-UI app is made.
        "ag_ui",
        "groundswell",
    }
    third_party = set()
    stdlib = set(sys.stdlib_module_names)
    for path in KERNEL.rglob("*.py"):
        if path.name in ("cli.py", "_render.py") or path.parent.name == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                third_party |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                third_party.add(node.module.split(".")[0])
    assert third_party - stdlib - allowed - {"__future__"} == set()


def test_running_a_workflow_never_imports_rich() -> None:
    code = (
        "import asyncio, sys, groundswell\n"
        "@groundswell.workflow\n"
        "async def w(ctx):\n"
        "    return await ctx.step('s', lambda: 1)\n"
        "r = asyncio.run(w.run()); r.tree.render()\n"
        "print('rich' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_groundswell_does_not_import_the_anthropic_sdk() -> None:
    # Nor does reaching Agent: the SDK is imported once a client is made.
    code = "import sys, groundswell; print('anthropic' in sys.modules); groundswell.Agent; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# Modules people and bundled plugins may import from, besides `groundswell` itself: each
# with its submodules, except `groundswell.waits`, whose client is its one public submodule.
PUBLIC_MODULES = ("groundswell.testing", "groundswell.evals", "groundswell.agui", "groundswell.cli")
PUBLIC_EXACT = {
    "groundswell.waits",
    "groundswell.waits.client",
    # Message Batches' timing and two steps, documented as a module in docs/api.md.
    "groundswell.model.batching",
}


def _is_public_module(module: str) -> bool:
    return module in PUBLIC_EXACT or any(
        module == p or module.startswith(p + ".") for p in PUBLIC_MODULES
    )


def _private_imports(tree: ast.AST) -> list[str]:
    """The kernel submodules, or `groundswell.agent` names outside its ``__all__``, imported."""
    import groundswell.agent

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.startswith("groundswell.") and not _is_public_module(a.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if not module.startswith("groundswell.") or _is_public_module(module):
                continue
            for alias in node.names:
                if module == "groundswell.agent" and alias.name in groundswell.agent.__all__:
                    continue
                if _is_public_module(
                    f"{module}.{alias.name}"
                ):  # from groundswell.model import batching
                    continue
                found.append(f"{module}.{alias.name}")
    return found


def test_bundled_plugins_import_only_the_public_api() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "plugins").rglob("*.py"))
        for name in _private_imports(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_docs_and_examples_import_only_the_public_api() -> None:
    offenders = []
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # a page may be a session
    for page in pages:
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
        for index, block in enumerate(blocks):
            tree = compile(block, f"{page.name} block {index + 1}", "exec", flags)
            offenders += [f"{page.name} block {index + 1}: {n}" for n in _private_imports(tree)]
    for script in sorted((ROOT / "examples").glob("*.py")):
        offenders += [
            f"{script.name}: {n}" for n in _private_imports(ast.parse(script.read_text()))
        ]
    assert offenders == []
