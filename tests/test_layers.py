"""The kernel's layering, checked by walking its imports (DESIGN section 2).

Layers, lowest first: errors and records, the tree, the plugin registry, the
run context; then the building blocks (model, prompt, tools and the features'
data); the agent loop; the default middleware; the public API. No module
imports one above it, none reads another module's private names, and the only
runtime import cycle is the tree's deliberately lazy import of its renderer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "groundswell"

# Module -> layer; a module may import modules of its own layer or below.
LAYERS: dict[str, int] = {
    # 0: errors, the plugin contract, and leaf modules every layer may use
    "groundswell.errors": 0,
    "groundswell.hookspecs": 0,
    "groundswell.scrubbing": 0,  # the scrubber, JSON-safe snapshots, the SDK's loggers
    "groundswell.cache.canonical": 0,
    "groundswell.tree.events": 0,
    "groundswell.tree.tracebacks": 0,
    "groundswell.model.thinking_blocks": 0,
    "groundswell.model.settings_check": 0,
    "groundswell.model.request_fields": 0,
    "groundswell.model.request_settings": 0,
    # 1: the tree (and what its nodes' costs are read from: the price table)
    "groundswell.tree": 1,
    "groundswell.budget.pricing": 1,
    # 2: the plugin registry
    "groundswell.plugins": 2,
    # 3: where a run is
    "groundswell.runtime": 3,
    # 4: building blocks: model, prompt, tools, workflows and each feature's logic
    "groundswell.model": 4,
    "groundswell.prompt": 4,
    "groundswell.tools": 4,
    "groundswell.mcp": 4,
    "groundswell.skills": 4,
    "groundswell.hooks": 4,
    "groundswell.cache": 4,
    "groundswell.budget": 4,
    "groundswell.reflection": 4,
    "groundswell.workflow": 4,
    "groundswell.waits": 4,
    # 5: the agent loop (and what answers an MCP server's sampling with an agent)
    "groundswell.agent": 5,
    "groundswell.mcp.sampling": 5,
    # 6: the kernel's default middleware, each beside the feature it serves
    "groundswell.middleware": 6,
    "groundswell.reflection.middleware": 6,
    "groundswell.hooks.middleware": 6,
    "groundswell.hooks.tool_calls": 6,
    "groundswell.prompt.extraction_middleware": 6,
    "groundswell.prompt.context_middleware": 6,
    "groundswell.skills.middleware": 6,
    "groundswell.mcp.middleware": 6,
    "groundswell.budget.middleware": 6,
    "groundswell.budget.summarize": 6,
    "groundswell.budget.context_ttl": 6,
    "groundswell.waits.approval_middleware": 6,
    "groundswell.cache.middleware": 6,
    "groundswell.cache.prompt_cache": 6,
    "groundswell.tools.timeout": 6,
    "groundswell.model.batch_middleware": 6,
    # 7: the public API and what only users call
    "groundswell": 7,
    "groundswell.__main__": 7,
    "groundswell.cli": 7,
    # answering waits from another process (over HTTP, or a backend a plugin registers)
    "groundswell.waits.client": 7,
    "groundswell.testing": 7,
    # evals: datasets, evaluators, runs and reports, capture and fork (users and CI call it)
    "groundswell.evals": 7,
    # AG-UI: a workflow or an agent served to AG-UI clients (an ASGI app)
    "groundswell.agui": 7,
}
# tree.render() imports the renderer (and rich) only when called.
ALLOWED_CYCLES = [
    {"groundswell.tree.tree", "groundswell.tree._render"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int:
    name = module
    while name not in LAYERS:
        assert "." in name, f"{module} has no layer: add it to LAYERS"
        name = name.rsplit(".", 1)[0]
    return LAYERS[name]


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (imports for types only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports(module: str) -> set[str]:
    """The kernel modules ``module`` imports at run time (at top level or inside functions)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                targets.append(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        found.update(t for t in targets if t in MODULES and t != module)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_layer_above_it(module: str) -> None:
    above = sorted(dep for dep in GRAPH[module] if _layer(dep) > _layer(module))
    assert not above, f"{module} (layer {_layer(module)}) imports {above} from a layer above"


def _private_definitions(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


PRIVATE = {module: _private_definitions(path) for module, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_reads_another_modules_private_names(module: str) -> None:
    own = PRIVATE[module]
    elsewhere = set().union(*(names for m, names in PRIVATE.items() if m != module)) - own
    tree = ast.parse(MODULES[module].read_text())
    reads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").startswith("groundswell")
        ):
            reads.update(a.name for a in node.names if a.name in elsewhere)
        elif isinstance(node, ast.Attribute) and node.attr in elsewhere:
            reads.add(node.attr)
    assert not reads, f"{module} reads private names of other modules: {sorted(reads)}"


def _cycles() -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in sorted(GRAPH):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_only_runtime_import_cycle_is_the_lazy_renderer() -> None:
    cycles = [c for c in _cycles() if c not in ALLOWED_CYCLES]
    assert not cycles, f"runtime import cycles: {[sorted(c) for c in cycles]}"


def test_every_kernel_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_the_kernel_never_imports_a_bundled_plugin() -> None:
    for module, path in MODULES.items():
        text = path.read_text()
        assert "import groundswell_" not in text and "from groundswell_" not in text, module
