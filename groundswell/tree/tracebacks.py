"""The traceback kept on a failed node: where its exception was raised, bounded and scrubbed.

A failed node's ``error`` is ``{"type", "message"}`` plus, when the exception
was raised, ``"traceback"``: its frames, outermost first and innermost (where
it was raised) last, each ``{"file", "line", "function", "code"}``, taken
from the exception's own ``__traceback__``, so they lead to the user's line,
not to where the framework caught it. Only the last `MAX_FRAMES` frames are
kept; ``"traceback_omitted"`` counts the others. Frames are read only when a
node fails, locals never, and every string goes through the scrubber.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Mapping
from typing import Any

from ..scrubbing.scrubber import scrub
from ..scrubbing.serialize import error_record

__all__ = ["MAX_FRAMES", "check_traceback", "failure_record", "format_traceback"]

#: How many frames a failed node keeps (the innermost ones: the cause is there).
MAX_FRAMES = 30
#: Source lines longer than this are cut, with an ellipsis.
MAX_CODE = 300


#: How many exceptions of a chain (``raise ... from ...``) a failed node keeps.
MAX_CHAIN = 3
_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


def failure_record(exc: BaseException, _depth: int = 0) -> dict[str, Any]:
    """``exc`` as a failed node's ``error``: type, message and its traceback (never raises).

    An exception raised ``from`` another (or while handling one) keeps that one
    too, under ``"cause"`` (with ``"context": true`` when it was only being
    handled), up to `MAX_CHAIN` deep, so the root cause's line is not lost.
    """
    record = error_record(exc)
    # A broken source loader or frame must not hide the failure itself.
    with contextlib.suppress(Exception):
        record.update(_traceback_fields(exc))
        if exc.__traceback__ is not None and _depth + 1 < MAX_CHAIN:
            below = exc.__cause__
            context = below is None and not exc.__suppress_context__
            if context:
                below = exc.__context__
            if below is not None and below is not exc:
                cause = failure_record(below, _depth + 1)
                if context:
                    cause["context"] = True
                record["cause"] = cause
    return record


def _traceback_fields(exc: BaseException) -> dict[str, Any]:
    if exc.__traceback__ is None:  # never raised: no frames to show
        return {}
    walked = list(traceback.walk_tb(exc.__traceback__))
    kept = walked[-MAX_FRAMES:]
    # Only the kept frames' source lines are read (linecache, as Python's own traceback does).
    summary = traceback.StackSummary.extract(iter(kept), lookup_lines=True, capture_locals=False)
    frames = []
    for entry in summary:
        frame: dict[str, Any] = {
            "file": scrub(entry.filename),
            "line": entry.lineno or 0,
            "function": scrub(entry.name),
        }
        code = (entry.line or "").strip()
        if code:
            if len(code) > MAX_CODE:
                code = code[: MAX_CODE - 1] + "…"
            frame["code"] = scrub(code)
        frames.append(frame)
    fields: dict[str, Any] = {"traceback": frames}
    if len(walked) > len(kept):
        fields["traceback_omitted"] = len(walked) - len(kept)
    return fields


_FRAME_FIELDS = (
    ("file", str, True),
    ("line", int, True),
    ("function", str, True),
    ("code", str, False),
)


def check_traceback(error: Mapping[str, Any], _where: str = "error") -> None:
    """``ValueError`` naming what is malformed in ``error``'s traceback fields, if anything."""
    cause = error.get("cause")
    if cause is not None:
        if not isinstance(cause, dict) or _where.count(".cause") >= MAX_CHAIN:
            raise ValueError(f"'{_where}.cause' should be an error object, got {cause!r:.40}")
        check_traceback(cause, f"{_where}.cause")
    frames = error.get("traceback")
    if frames is not None:
        if not isinstance(frames, list):
            raise ValueError(f"'{_where}.traceback' should be a list, got {frames!r:.40}")
        for i, frame in enumerate(frames):
            where = f"'{_where}.traceback' frame {i}"
            if not isinstance(frame, dict):
                raise ValueError(f"{where} should be an object, got {frame!r:.40}")
            for key, kind, required in _FRAME_FIELDS:
                value = frame.get(key)
                if value is None and not required:
                    continue
                if not isinstance(value, kind) or isinstance(value, bool):
                    expected = "a number" if kind is int else "a string"
                    raise ValueError(f"{where}: {key!r} should be {expected}, got {value!r:.40}")
    omitted = error.get("traceback_omitted")
    if omitted is not None and (
        not isinstance(omitted, int) or isinstance(omitted, bool) or omitted < 0
    ):
        raise ValueError(f"'{_where}.traceback_omitted' should be a count, got {omitted!r:.40}")


def format_traceback(error: Mapping[str, Any]) -> str | None:
    """A failed node's ``error`` as Python prints an exception, or ``None`` without frames.

    The frames then ``Type: message``, the way ``traceback.format_exception``
    writes them (the OpenTelemetry ``exception.stacktrace`` form); left-out
    frames are counted on one line. Scrubbed again: the record may come from a file.
    """
    frames = error.get("traceback")
    if not isinstance(frames, list) or not frames:
        return None
    lines = []
    cause = error.get("cause")
    earlier = format_traceback(cause) if isinstance(cause, Mapping) else None
    if earlier is not None:
        assert isinstance(cause, Mapping)
        lines += [earlier, "", _CONTEXT if cause.get("context") else _CAUSE, ""]
    lines.append("Traceback (most recent call last):")
    omitted = error.get("traceback_omitted")
    if isinstance(omitted, int) and omitted > 0:
        lines.append(f"  ... {omitted} earlier frame{'s' if omitted != 1 else ''} left out")
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        lines.append(
            f'  File "{frame.get("file")}", line {frame.get("line")}, in {frame.get("function")}'
        )
        if frame.get("code"):
            lines.append(f"    {frame['code']}")
    kind, message = str(error.get("type") or "Exception"), str(error.get("message") or "")
    lines.append(f"{kind}: {message}" if message else kind)
    return scrub("\n".join(lines))
