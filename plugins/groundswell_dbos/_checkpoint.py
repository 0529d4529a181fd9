"""What a checkpoint may hold: values another process can load, and never a secret."""

from __future__ import annotations

import io
import pickle
from typing import Any

from pydantic import SecretBytes, SecretStr

from groundswell import WorkflowCall, is_recoverable, is_secret_key, redact, scrub

from . import CheckpointError, StepFailed

__all__ = ["StepFailure", "check_arguments", "check_checkpointable", "step_failure"]

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
    re-raises this, and the engine raises ``error`` in its place.
    """

    def __init__(self, error: BaseException, children: list[dict[str, Any]]) -> None:
        super().__init__(f"{type(error).__name__}: {redact(str(error))}")
        self.error = error
        self.children = children

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.error, self.children))


def _loads_back_without_secrets(exc: BaseException) -> bool:
    if any(is_secret_key(attr) for attr in getattr(exc, "__dict__", {})):
        return False
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        return False
    # Registered secrets (API keys, env values) anywhere inside, attributes included.
    text = blob.decode("utf-8", errors="replace")
    return scrub(text) == text


def step_failure(exc: Exception, children: list[dict[str, Any]]) -> StepFailure:
    """The checkpoint of a step that raised ``exc``.

    The exception itself when it loads back and holds no secret, so a recovered
    run takes the same path; otherwise a `StepFailed` with its type name and
    scrubbed message, which keeps whether reflection may retry it.
    """
    if _loads_back_without_secrets(exc):
        return StepFailure(exc, children)
    stand_in = StepFailed(f"{type(exc).__name__}: {redact(str(exc))}")
    stand_in.recoverable = is_recoverable(exc)
    return StepFailure(stand_in, children)
