"""Output extraction: lift named pieces out of a model's answer.

``Prompt(extract=[Extract(r"<answer>(.*?)</answer>", "answer"), ...])``: after
the agent answers, each rule's ``pattern`` is searched in the answer text
(``re.DOTALL | re.IGNORECASE``); group 1 if the pattern has groups, else the
whole match. Values land in ``ctx.state[store_as]`` (inside a workflow), on
the prompt node (``payload["extracted"]``) and in
`PromptResult.extracted <groundswell.PromptResult.extracted>`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigurationError, ExtractionError

__all__ = ["Extract", "extract_all"]

Format = Literal["text", "json", "code"]
_FORMATS = ("text", "json", "code")
_FLAGS = re.DOTALL | re.IGNORECASE
# A fenced block: ``` or ~~~, an optional info string, the body, the closing fence;
# or all of it on one line ("```json {...}```").
_FENCE = re.compile(r"(`{3,}|~{3,})[^\n]*\n(.*?)\n?\1", re.DOTALL)
_ONE_LINE_FENCE = re.compile(r"(`{3,}|~{3,})(.*?)\1")
# On one line, a language name is told from code only where JSON follows it.
_JSON_LANGUAGE = re.compile(r"^[\w+-]+\s+(?=[\[{\"])")
_MISSING = object()


@dataclass(frozen=True)
class Extract:
    """One extraction rule of a prompt.

    ``pattern`` is a regular expression (a string, or a compiled pattern whose
    own flags are kept) searched with ``re.DOTALL | re.IGNORECASE``.
    ``store_as`` names the value. ``format``: ``text`` (the match, stripped),
    ``json`` (parsed; a fenced ```json block inside the match is unwrapped
    first) or ``code`` (the body of the first fenced block in the match, else
    the match). ``multiple=True`` collects every match into a list. A
    ``required`` rule that finds nothing (or only blank text), or whose JSON
    does not parse, raises `ExtractionError`; otherwise
    ``default`` is stored (``[]`` for ``multiple`` when no default is given)
    and an ``extraction_missed`` event says why.
    """

    pattern: str | re.Pattern[str]
    store_as: str
    format: Format = "text"
    required: bool = False
    multiple: bool = False
    default: Any = None
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.store_as, str) or not self.store_as.strip():
            raise ConfigurationError(
                f"Extract.store_as must be a non-empty string, got {self.store_as!r}"
            )
        for flag in ("required", "multiple"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(
                    f"Extract {self.store_as!r}: {flag} must be True or False, "
                    f"got {getattr(self, flag)!r:.40}"
                )
        if self.format not in _FORMATS:
            raise ConfigurationError(
                f"Extract {self.store_as!r}: format must be one of {', '.join(_FORMATS)}; "
                f"got {self.format!r}"
            )
        if isinstance(self.pattern, re.Pattern):
            if not isinstance(self.pattern.pattern, str):
                raise ConfigurationError(
                    f"Extract {self.store_as!r}: pattern must match text (str), not bytes"
                )
            regex = re.compile(self.pattern.pattern, self.pattern.flags | _FLAGS)
        elif isinstance(self.pattern, str) and self.pattern:
            try:
                regex = re.compile(self.pattern, _FLAGS)
            except re.error as exc:
                raise ConfigurationError(
                    f"Extract {self.store_as!r}: pattern {self.pattern!r} is not a valid "
                    f"regular expression: {exc}"
                ) from exc
        else:
            raise ConfigurationError(
                f"Extract {self.store_as!r}: pattern must be a non-empty regex string, "
                f"got {self.pattern!r}"
            )
        object.__setattr__(self, "_regex", regex)

    @property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern, with ``re.DOTALL | re.IGNORECASE``."""
        return self._regex

    def apply(self, text: str) -> Any:
        """The value this rule extracts from ``text``.

        Raises `ExtractionError` when the rule is required and finds
        nothing usable; returns ``default`` when it is not.
        """
        value, problem = self._extract(text)
        if problem is None:
            return value
        if self.required:
            raise ExtractionError(problem, raw=text, store_as=self.store_as)
        return self.fallback()

    def fallback(self) -> Any:
        """What a rule that is not required stores when it finds nothing usable."""
        if self.default is None and self.multiple:
            return []
        return self.default

    def _extract(self, text: str) -> tuple[Any, str | None]:
        """``(value, None)``, or ``(_MISSING, why it failed)``."""
        regex = self._regex
        matches = list(regex.finditer(text)) if self.multiple else [regex.search(text)]
        found = [m for m in matches if m is not None]
        if not found:
            return _MISSING, (
                f"required extraction {self.store_as!r} found nothing: the answer has no match "
                f"for the pattern {regex.pattern!r}"
            )
        values = []
        for match in found:
            piece = match.group(1) if regex.groups else match.group(0)
            if self.required and not (piece or "").strip():
                return _MISSING, (
                    f"required extraction {self.store_as!r} matched only blank text with the "
                    f"pattern {regex.pattern!r}"
                )
            value, problem = self._convert(piece or "")
            if problem is not None:
                return _MISSING, problem
            values.append(value)
        return (values if self.multiple else values[0]), None

    def _convert(self, piece: str) -> tuple[Any, str | None]:
        if self.format == "text":
            return piece.strip(), None
        fenced = _FENCE.search(piece)
        if fenced:
            body = fenced.group(2)
        elif one_line := _ONE_LINE_FENCE.search(piece):
            body = one_line.group(2).strip()
            if self.format == "json":
                body = _JSON_LANGUAGE.sub("", body, count=1)
        else:
            body = piece
        if self.format == "code":
            return body.strip("\n"), None
        try:
            return json.loads(body), None
        except json.JSONDecodeError as exc:
            return _MISSING, (
                f"extraction {self.store_as!r} matched, but the match is not valid JSON "
                f"({exc}): {body.strip()[:200]!r}"
            )


def check_rules(value: Any) -> tuple[Extract, ...]:
    """``Prompt(extract=...)`` as a tuple of rules; a clear error for anything else."""
    if value is None:
        return ()
    rules = (value,) if isinstance(value, Extract) else value
    if isinstance(rules, str | bytes | Mapping) or not isinstance(rules, Sequence | tuple):
        raise ConfigurationError(
            f"Prompt.extract must be an Extract or a list of Extract, got {type(value).__name__}"
        )
    seen: set[str] = set()
    for rule in rules:
        if not isinstance(rule, Extract):
            raise ConfigurationError(
                f"Prompt.extract items must be groundswell.Extract, got {type(rule).__name__}"
            )
        if rule.store_as in seen:
            raise ConfigurationError(
                f"two Extract rules store as {rule.store_as!r}; each needs its own name"
            )
        seen.add(rule.store_as)
    return tuple(rules)


def extract_all(rules: Sequence[Extract], text: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Apply every rule: ``(values by store_as, misses)``.

    The first required rule that fails raises `ExtractionError`; a
    rule that is not required and fails stores its ``default`` and adds a
    ``{"store_as", "reason"}`` miss.
    """
    values: dict[str, Any] = {}
    misses: list[dict[str, str]] = []
    for rule in rules:
        value, problem = rule._extract(text)
        if problem is None:
            values[rule.store_as] = value
            continue
        if rule.required:
            raise ExtractionError(problem, raw=text, store_as=rule.store_as)
        values[rule.store_as] = rule.fallback()
        misses.append({"store_as": rule.store_as, "reason": problem.replace("required ", "", 1)})
    return values, misses
