"""Redact personal data before it reaches the model: the ``pii`` agent middleware.

Opt in per agent, by name or with your own settings::

    Agent(middleware=["pii"])
    Agent(middleware=[PIIRedactor(kinds=["EMAIL", "CARD"],
                                  extra_patterns={"EMPLOYEE_ID": r"\\bE-\\d{6}\\b"})])

E-mail addresses, phone numbers, payment card numbers (Luhn-checked), IBANs
(mod-97-checked) and US social security numbers become ``[EMAIL]``,
``[PHONE]``, ``[CARD]``, ``[IBAN]`` and ``[SSN]`` in every text the model is
sent (messages, tool results, the system prompt), and tool results are
redacted before the tool node records them. Each redaction is a
``pii_redacted`` event (counts per kind, never the values) on the prompt or
tool node. See ``docs/pii.md``.
"""

from __future__ import annotations

from groundswell import AgentMiddleware, hookimpl

from .detect import KINDS
from .middleware import PIIRedactor

__all__ = ["KINDS", "PIIRedactor"]


@hookimpl
def register_agent_middleware() -> AgentMiddleware:
    # Inside the caches, budgets and hooks (order 400): they see the originals of the
    # conversation, and a tool's result only once it is redacted.
    return AgentMiddleware(
        "pii",
        PIIRedactor,
        PIIRedactor.order,
        False,
        "redacts e-mails, phones, cards, IBANs and SSNs in what the model is sent",
    )
