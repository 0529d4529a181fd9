"""What a checkpoint may hold: values another process can load, and never a secret."""

from __future__ import annotations

import importlib
import io
import pickle
from typing import Any

from pydantic import SecretBytes, SecretStr

from groundswell import WorkflowCall, is_recoverable, is_secret_key, redact, scrub

from . import CheckpointError, StepFailed

__all__ = ["StepFailure", "check_arguments", "check_checkpointable"]

_PLAIN_DATA = (
    "use plain data: dicts, lists, strings, numbers, dataclasses or pydantic models "
    "defined at module level"
)


class _Refused(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Probe(pickle.Pickler):
    """Pickles as DBOS will, refusing what a checkpoint must not hold or could not give back."""

    def reducer_override(self, obj: Any) -> Any:
        # Not called for plain str/int/dict/list..., so this costs little on plain data.
        if isinstance(obj, SecretStr | SecretBytes):
            raise _Refused(
                f"holds a pydantic {type(obj).__name__}, which a checkpoint would store in "
                "clear; pass the name of the secret and look it up inside the step instead"
            )
        kind = obj if isinstance(obj, type) else type(obj)
        if getattr(kind, "__module__", None) == "__main__":
            # Pickled as "__main__.Name": a worker or a recovering process, whose
            # __main__ is another program, could not load it back.
            raise _Refused(
                f"holds a {kind.__qualname__} defined in the script being run (__main__), "
                "which another process cannot load; define it in a module both import"
            )
        return NotImplemented


def check_checkpointable(value: Any, what: str) -> None:
    """Raise `CheckpointError` unless ``value`` can be checkpointed; ``what`` names it."""
    try:
        _Probe(io.BytesIO()).dump(value)
    except _Refused as refused:
        raise CheckpointError(f"{what} {refused.why}") from None
    except Exception as exc:
        raise CheckpointError(
            f"{what} is a {type(value).__name__}, which cannot be checkpointed "
            f"({type(exc).__name__}: {exc}); {_PLAIN_DATA}"
        ) from exc


def check_arguments(call: WorkflowCall) -> None:
    """Refuse arguments that cannot be checkpointed, naming the first bad one."""
    name = call.workflow.name
    for i, arg in enumerate(call.args, 1):
        check_checkpointable(arg, f"argument {i} of durable workflow {name!r}")
    for key, arg in call.kwargs.items():
        check_checkpointable(arg, f"argument {key!r} of durable workflow {name!r}")


class StepFailure(Exception):
    """What a failed step's checkpoint holds: its exception and the subtree it built.

    A wrapper, so the user's exception object is never altered; DBOS records and
    re-raises this, and the engine raises ``error`` in its place. The exception
    is stored as data (its class, scrubbed arguments, the attributes that can
    be checkpointed, its cause) and rebuilt as the same class without calling
    its ``__init__``, so a recovered run's ``except`` clauses and reflection
    see what the live run saw, whatever the class's constructor takes.
    """

    def __init__(self, error: BaseException, children: list[dict[str, Any]]) -> None:
        super().__init__(f"{type(error).__name__}: {redact(str(error))}")
        self.error = error
        self.children = children

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_failure, (_freeze(self.error), self.children))


def _restore_failure(frozen: dict[str, Any], children: list[dict[str, Any]]) -> StepFailure:
    return StepFailure(_thaw(frozen), children)


def _safe(value: Any) -> Any:
    """``value`` if it can be checkpointed without a secret (strings scrubbed), else a marker."""
    if isinstance(value, str):
        return scrub(value)
    try:
        buffer = io.BytesIO()
        _Probe(buffer).dump(value)  # the same bytes pickle.dumps gives, checked on the way
        blob = buffer.getvalue()
        pickle.loads(blob)
    except Exception:
        return _DROPPED
    text = blob.decode("utf-8", errors="replace")
    return value if scrub(text) == text else _DROPPED


_DROPPED = "(not checkpointed)"
_MAX_CAUSES = 8


def _freeze(exc: BaseException, depth: int = 0) -> dict[str, Any]:
    kind = type(exc)
    state = {
        k: _DROPPED if is_secret_key(k) else _safe(v)
        for k, v in getattr(exc, "__dict__", {}).items()
    }
    cause = exc.__cause__
    return {
        "module": kind.__module__,
        "qualname": kind.__qualname__,
        "message": scrub(str(exc)),
        "args": tuple(_safe(a) for a in exc.args),
        "state": state,
        # Kept apart from the state: a stand-in must answer is_recoverable alike.
        "recoverable": is_recoverable(exc) if isinstance(exc, Exception) else False,
        "cause": _freeze(cause, depth + 1) if cause is not None and depth < _MAX_CAUSES else None,
    }


def _thaw(frozen: dict[str, Any]) -> BaseException:
    exc: BaseException
    try:
        kind: Any = importlib.import_module(frozen["module"])
        for part in frozen["qualname"].split("."):
            kind = getattr(kind, part)
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"{frozen['qualname']} is not an exception class")
        exc = kind.__new__(kind, *frozen["args"])
        exc.args = frozen["args"]
        exc.__dict__.update(frozen["state"])
    except Exception:
        # Its class cannot be found here (defined in a function or a script).
        stand_in = StepFailed(f"{frozen['qualname']}: {frozen['message']}")
        stand_in.recoverable = frozen["recoverable"]
        exc = stand_in
    if frozen["cause"] is not None:
        exc.__cause__ = _thaw(frozen["cause"])
    return exc
