"""JSON Patch (RFC 6902) between two JSON values: how `ctx.state` changed, as AG-UI's STATE_DELTA."""

from __future__ import annotations

from typing import Any

__all__ = ["diff"]


def _pointer(path: str, key: str) -> str:
    # RFC 6901: "~" and "/" inside a key are escaped, "~" first.
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


def diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """The operations that turn ``old`` into ``new`` (both JSON values); empty when equal.

    Objects are compared key by key (``add``, ``remove``, or a nested patch);
    any other change, a list's included, ``replace``s the value whole: lists in
    state are usually short, and an index-wise patch of an insertion is longer.
    """
    if old == new and type(old) is type(new):
        return []
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [{"op": "replace", "path": path, "value": new}]
    ops: list[dict[str, Any]] = []
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": _pointer(path, str(key))})
    for key, value in new.items():
        where = _pointer(path, str(key))
        if key not in old:
            ops.append({"op": "add", "path": where, "value": value})
        else:
            ops.extend(diff(old[key], value, where))
    return ops
