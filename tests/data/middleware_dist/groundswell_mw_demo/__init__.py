"""groundswell-mw-demo: agent middleware shipped as a third-party distribution.

A test fixture laid out the way pip leaves an installed plugin: this package
next to its ``groundswell_mw_demo-1.0.0.dist-info`` folder, whose
``entry_points.txt`` names it in the ``groundswell`` group. Registering only
builds records; each factory imports `groundswell_mw_demo.layers` when a
prompt first needs the middleware, as a real plugin should.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from groundswell import AgentMiddleware, hookimpl

LICENCE_ENV = "MWDEMO_LICENCE"


def _lazy(cls: str) -> Callable[[], Any]:
    def make() -> Any:
        return getattr(importlib.import_module(f"{__name__}.layers"), cls)()

    return make


def _licensed() -> Any:
    key = os.environ.get(LICENCE_ENV)
    if not key:
        raise RuntimeError(f"no licence key: set {LICENCE_ENV}")
    return _lazy("Licensed")()


@hookimpl
def register_agent_middleware() -> list[AgentMiddleware]:
    return [
        AgentMiddleware("stamp", _lazy("Stamp"), description="house style and a user id"),
        AgentMiddleware("canned", _lazy("Canned"), description="answers without the API"),
        AgentMiddleware("tool_rewrite", _lazy("ToolRewrite"), description="cleans tool I/O"),
        AgentMiddleware("tool_guard", _lazy("ToolGuard"), 400, True, "refuses danger_ tools"),
        AgentMiddleware("retry_once", _lazy("RetryOnce"), 120, description="one more try"),
        AgentMiddleware("retry_undeclared", _lazy("RetryUndeclared"), 120, description="likewise"),
        AgentMiddleware("shout", _lazy("Shout"), 450, description="upper-cases the answer"),
        AgentMiddleware("audit_a", _lazy("AuditA"), 450, description="traces every seam"),
        AgentMiddleware("audit_b", _lazy("AuditB"), 450, description="traces every seam"),
        AgentMiddleware("licensed", _licensed, 600, True, "needs MWDEMO_LICENCE"),
        AgentMiddleware("premium", _licensed, 610, description="needs MWDEMO_LICENCE"),
    ]
