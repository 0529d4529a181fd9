"""``auto_answer``: a test answers the waits its code opens, the moment they open."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextvars import Token
from types import TracebackType
from typing import Any

from ..errors import ConfigurationError
from ..waits.core import Answerer, Decision, Wait, drop_answerer, use_answerer
from ._recorded_waits import NoRecordedDecision, RecordedWaits

__all__ = ["AutoAnswer", "auto_answer"]


class AutoAnswer:
    """Answers every wait opened while it is active (``with`` or ``async with``).

    Made by `auto_answer`; ``answered`` lists ``(wait, decision)`` for each
    wait it answered, in order. With ``from_trace``, ``recorded`` holds the
    trace's decisions (``recorded.remaining`` counts those not given yet).
    """

    def __init__(
        self,
        answerer: Callable[[Wait], Any] | None,
        approve: bool | None,
        answers: Mapping[str, Any],
        by: str,
        recorded: RecordedWaits | None = None,
    ) -> None:
        self.recorded = recorded
        self.answerer = answerer
        self.approve = approve
        self.answers = dict(answers)
        self.by = by
        self.answered: list[tuple[Wait, Decision]] = []
        self._tokens: list[Token[tuple[Answerer, ...]]] = []

    def __call__(self, wait: Wait) -> Decision | None:
        """The decision on ``wait``, or ``None`` to leave it open for someone else."""
        reply: Any = None
        if self.answerer is not None:
            reply = self.answerer(wait)
        if reply is None:
            reply = self._from_answers(wait)
        if reply is None and wait.kind == "approval" and self.approve is not None:
            reply = self.approve
        if reply is None and self.recorded is not None:
            # Fails the wait at once when the trace has no decision for it: the
            # replay went another way, and nobody is there to answer.
            reply = self.recorded.decide(wait)
        if reply is None:
            return None
        decision = self._decision(wait, reply)
        self.answered.append((wait, decision))
        return decision

    def _from_answers(self, wait: Wait) -> Any:
        # The question's text or the tool's name first, then the wait's kind.
        for key in (wait.request.get("question"), wait.request.get("tool"), wait.kind):
            if isinstance(key, str) and key in self.answers:
                return self.answers[key]
        return None

    def _decision(self, wait: Wait, reply: Any) -> Decision:
        if isinstance(reply, Decision):
            decision = reply
        elif wait.kind == "approval":
            if not isinstance(reply, bool):
                raise ConfigurationError(
                    f"auto_answer: an approval (wait {wait.id}) takes True, False or a "
                    f"groundswell.waits.Decision, got {type(reply).__name__} {reply!r:.60}"
                )
            decision = Decision.approve() if reply else Decision.reject(f"rejected by {self.by}")
        else:
            decision = Decision.answer(reply)
        return decision if decision.by else dataclasses.replace(decision, by=self.by)

    def __enter__(self) -> AutoAnswer:
        self._tokens.append(use_answerer(self))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        drop_answerer(self._tokens.pop())
        missing = self.recorded.missing if self.recorded is not None else []
        if missing and not isinstance(error, NoRecordedDecision):
            # The run may have gone on after the failed wait (a tool call's error is the
            # model's to read): the test still fails, naming every wait the trace lacked.
            raise NoRecordedDecision(
                f"auto_answer(from_trace=...): {len(missing)} wait(s) opened in the replay had "
                f"no recorded decision: {'; '.join(missing)}",
                missing,
            ) from error

    async def __aenter__(self) -> AutoAnswer:
        return self.__enter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.__exit__(kind, error, trace)


def auto_answer(
    answerer: Callable[[Wait], Any] | None = None,
    /,
    *,
    approve: bool | None = None,
    answers: Mapping[str, Any] | None = None,
    by: str = "auto_answer",
    from_trace: Any = None,
) -> AutoAnswer:
    """Answer the waits (``ctx.ask`` questions, approvals) opened inside the block, at once.

    ```python
    with auto_answer(answers={"Ship it?": "yes"}):
        result = await release.run()
    ```

    Each wait is answered the moment it opens, and recorded on its ``wait``
    node like a person's answer (``answered_by`` is ``by``). The first rule
    that gives a reply decides:

    - ``answerer(wait)``, a callable given the `groundswell.waits.Wait`: it
      returns a `groundswell.waits.Decision`, a plain value (a question's
      answer; ``True``/``False`` approves or rejects an approval), or ``None``
      to pass;
    - ``answers``: the reply for a question's text, a tool's name, or a wait
      kind (``"question"``, ``"approval"``);
    - ``approve``: ``True`` approves every approval, ``False`` rejects it;
    - ``from_trace``: a saved run (what ``FakeAnthropicAPI.from_trace``
      takes: an ``EventTree``, its ``to_json()`` dict, a trace file or a
      folder of them): each wait gets the decision recorded on the matching
      ``wait`` node (same kind, same path in the tree, in the order they
      opened), as the tree holds it (masked secrets stay masked). A wait the
      trace has no decision for fails at once with `NoRecordedDecision`, and
      the block raises it again when it ends.

    A wait no rule answers stays open (`groundswell.waits.pending` lists it);
    nested blocks ask the innermost first.
    Answers are checked like a person's: one that does not fit the question's
    ``response_format`` fails the wait with `InvalidAnswer`. It applies to code
    run in the block's context (tasks started inside it, runs awaited there);
    ``answered`` lists what it answered.
    """
    if answerer is not None and not callable(answerer):
        raise ConfigurationError(
            f"auto_answer(answerer): give a callable taking the Wait, got {type(answerer).__name__}"
        )
    if approve is not None and not isinstance(approve, bool):
        raise ConfigurationError(f"auto_answer(approve=...) takes True or False, got {approve!r}")
    if answers is not None and not isinstance(answers, Mapping):
        raise ConfigurationError(
            f"auto_answer(answers=...) takes a dict of question text (or tool name, or wait "
            f"kind) to reply, got {type(answers).__name__}"
        )
    if not isinstance(by, str) or not by:
        raise ConfigurationError(f"auto_answer(by=...) names who answered, got {by!r}")
    recorded = RecordedWaits(from_trace) if from_trace is not None else None
    return AutoAnswer(answerer, approve, answers or {}, by, recorded)
