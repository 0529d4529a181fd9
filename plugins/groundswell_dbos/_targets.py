"""Naming durable workflows so that another process (a worker, a recovering process) can import them."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

from groundswell import ConfigurationError, Workflow

from . import _runtime

__all__ = ["resolve", "target_of"]

_targets: weakref.WeakKeyDictionary[Workflow[Any, Any], dict[str, str]] = (
    weakref.WeakKeyDictionary()
)


def _attr_in(module: ModuleType | None, wf: Workflow[Any, Any]) -> str | None:
    if module is None:
        return None
    try:
        names = list(vars(module).items())
    except TypeError:  # a module-like object without a __dict__
        return None
    return next((k for k, v in names if v is wf), None)


def target_of(wf: Workflow[Any, Any]) -> dict[str, str]:
    """Where another process finds ``wf``: the module and attribute holding it.

    The module that defines the workflow's function is looked at first; a
    workflow bound in another module (``flows.nightly = Workflow(body)``) is
    found by looking through the imported modules once.
    """
    known = _targets.get(wf)
    if known is not None:
        return known
    home = getattr(wf.executor, "__module__", None) or ""
    module_name, attr = home, _attr_in(sys.modules.get(home), wf)
    if attr is None:
        # The running script last: a worker would run its top level to import it.
        names = sorted(sys.modules, key=lambda name: name == "__main__")
        for name in names:
            attr = _attr_in(sys.modules.get(name), wf)
            if attr is not None:
                module_name = name
                break
    if attr is None:
        raise ConfigurationError(
            f"durable workflow {wf.name!r} must be a module-level name, so that a recovering "
            f"process or a worker can import it; no imported module holds it (it was made "
            f"inside a function or at run time; its function is defined in {home!r})"
        )
    target = {"module": module_name, "attr": attr, "name": wf.name}
    if module_name == "__main__":
        file = getattr(sys.modules["__main__"], "__file__", None)
        if not file:
            raise ConfigurationError(
                f"durable workflow {wf.name!r} is defined in an interactive session; "
                "define it in a file that other processes can import"
            )
        target["file"] = str(Path(file).resolve())
    _targets[wf] = target
    return target


def resolve(target: dict[str, str]) -> Workflow[Any, Any]:
    """Import the workflow ``target`` names; `ConfigurationError` saying how to fix it."""
    label = f"{target.get('module')}:{target.get('attr')}"
    try:
        module = _import(target)
        wf = getattr(module, target["attr"])
    except Exception as exc:
        raise ConfigurationError(
            f"durable workflow {target.get('name')!r} ({label}) cannot be imported by "
            f"executor {_runtime.executor_id()}: {type(exc).__name__}: {exc}; run workers "
            "and recovering processes with the same code, from the project folder or with "
            "PYTHONPATH set so that the module imports"
        ) from exc
    if not isinstance(wf, Workflow):
        raise ConfigurationError(
            f"{label} is a {type(wf).__name__}, not a Workflow; was it renamed since the run started?"
        )
    return wf


def _import(target: dict[str, str]) -> Any:
    if target["module"] != "__main__":
        return importlib.import_module(target["module"])
    # A script's workflows: this process may be that script, or a worker that
    # loads it by path (its `if __name__ == "__main__":` block does not run).
    file = target["file"]
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main_file and os.path.exists(file) and os.path.samefile(main_file, file):
        return main
    name = "groundswell_script_" + hashlib.sha256(file.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"no script at {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
