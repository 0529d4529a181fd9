"""The SDK's own loggers never write a secret while Groundswell is imported.

With ``DEBUG`` logging on, the ``anthropic`` SDK logs each request's options:
the whole body, tool results and a remote MCP server's ``authorization_token``
included. `install` puts a filter on the SDK's loggers and its HTTP client's
(``httpx2``, ``httpcore2``) that runs Groundswell's scrubber (`scrub`: the
registered secrets, secret environment values and known credential shapes)
over every record they emit, before any handler sees it.

A logger's filters only see the records of that very logger, not of the
loggers below it, so the filter goes on each one. Groundswell imports the SDK
only when it first needs it (an `Agent`), so `install` runs twice: at import,
where it also makes the loggers the SDK logs requests and responses on (the SDK
takes those very logger objects when it is imported), and once the SDK is
loaded, for every other logger it made. Filters only run for records a logger
lets through: with ``DEBUG`` off they cost nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .scrubber import scrub, scrub_json

__all__ = ["SDK_LOGGERS", "ScrubRecords", "install"]

#: The loggers (and every logger below them) whose records are scrubbed.
SDK_LOGGERS = ("anthropic", "httpx2", "httpcore2")
# Where request and response bodies are logged: filtered before the SDK is even loaded.
_BODIES = ("anthropic", "anthropic._base_client", "anthropic._response", "httpx2")


class ScrubRecords(logging.Filter):
    """Scrub a record's message and arguments in place; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        try:
            if isinstance(args, Mapping):
                record.args = scrub_json(dict(args))
            elif args:
                # Values under a secret-named key go whole (the SDK logs dicts); the
                # rest is scrubbed as the text it is formatted into.
                record.args = tuple(
                    scrub_json(a) if isinstance(a, dict | list) else a for a in args
                )
            message = record.getMessage()
        except Exception:  # a record logging cannot format: it reports that itself
            record.args = args
            return True
        record.msg, record.args = scrub(message), ()
        if record.exc_info and not record.exc_text:
            # Formatters use this text when it is set, so the traceback is scrubbed too.
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER = ScrubRecords()


#: How many loggers existed when the filter was last installed: a model call installs it
#: again only when there are more (the transport makes ``httpcore2.*`` when its first
#: connection opens), so the common call pays one ``len()``.
known = 0


def install() -> None:
    """Put the filter on the SDK loggers and on every logger below them that exists now."""
    global known
    names = set(_BODIES)
    for name in list(logging.Logger.manager.loggerDict):
        if name.split(".", 1)[0] in SDK_LOGGERS:
            names.add(name)
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    known = len(logging.Logger.manager.loggerDict)


install()
