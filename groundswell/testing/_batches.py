"""The fake API's Message Batches endpoints, in the real API's shapes.

``POST /v1/messages/batches`` creates a batch, ``GET .../{id}`` retrieves
(polls) it, ``GET /v1/messages/batches`` lists them, ``POST .../{id}/cancel``
cancels one, ``DELETE .../{id}`` deletes an ended one, and the batch's
``results_url`` (``.../{id}/results`` on the fake's own base URL) streams its
results as JSONL. Each request in a batch is answered as a ``/v1/messages``
request is, by the fake's model (script, function or schema model), when the
batch processes it; `FakeBatches` says when that is.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

from ..errors import ConfigurationError
from ._replies import (
    Answer,
    ErrorReply,
    MessagesRequest,
    RawReply,
    Reply,
    as_answer,
    error,
    new_id,
)

__all__ = ["FakeBatch", "FakeBatches"]

BATCHES = "/v1/messages/batches"
#: The API's limit on requests in one batch.
MAX_REQUESTS = 100_000
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# How long the API keeps processing a batch before the rest of it expires.
LIFETIME = timedelta(hours=24)

Status = Literal["in_progress", "canceling", "ended"]
Response = tuple[int, dict[str, str], Iterator[bytes]]


def _rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class FakeBatch:
    """One batch the fake accepted: what was sent, and how far its processing is.

    ``requests`` holds each request's ``params`` as a `MessagesRequest` (its
    ``custom_id`` set), in the order sent; ``results`` maps each answered
    ``custom_id`` to its result as the results file gives it. ``polls`` counts
    the retrieves that saw the batch in progress.
    """

    id: str
    requests: list[MessagesRequest]
    created_at: datetime
    processing_status: Status = "in_progress"
    polls: int = 0
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended_at: datetime | None = None
    cancel_initiated_at: datetime | None = None
    deleted: bool = False

    @property
    def custom_ids(self) -> list[str]:
        """The requests' ``custom_id`` values, in the order sent."""
        return [str(r.custom_id) for r in self.requests]


class FakeBatches:
    """The batches a fake received (``fake.batches``), oldest first, and the knobs on them.

    A batch is created ``in_progress``. Each retrieve of it counts as a poll;
    ``polls`` (default 0) is how many retrieves still see it in progress, so
    by default the first retrieve after create sees it ``ended``. Its requests
    are answered over those polls, in the order sent (the last poll answers the
    rest), so a batch canceled midway has some results and some ``canceled``.
    With ``polls=None`` a batch ends only when the test calls `end`. A
    canceled batch is ``canceling`` until its next retrieve, then ``ended``.

    Each request answered is recorded in the fake's ``requests`` (with its
    ``custom_id``) as a ``/v1/messages`` request is, and its result's usage
    is counted the same way; a reply's ``delay`` and stream faults do not apply.
    """

    def __init__(
        self,
        refuse: Callable[[dict[str, Any]], ErrorReply | None],
        respond: Callable[[MessagesRequest, Answer | None], Answer],
        message: Callable[[MessagesRequest, Reply], dict[str, Any]],
        polls: int | None = 0,
    ) -> None:
        # The fake's own steps for a /v1/messages request: refuse, record and answer, build.
        self._refuse, self._respond, self._message = refuse, respond, message
        self.polls = polls
        #: Answers by ``custom_id`` (set with `answer`), used before the fake's model.
        self.answers: dict[str, Answer] = {}
        self._batches: list[FakeBatch] = []
        self._lock = threading.RLock()

    @property
    def polls(self) -> int | None:
        """Retrieves that see a batch in progress before it ends; ``None``: until `end`."""
        return self._polls

    @polls.setter
    def polls(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ConfigurationError(
                "groundswell.testing: batch polls is how many retrieves see a batch in "
                f"progress before it ends (an int >= 0, or None to end it with "
                f"fake.batches.end()); got {value!r}"
            )
        self._polls = value

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[FakeBatch]:
        return iter(list(self._batches))

    def __getitem__(self, index: int) -> FakeBatch:
        return self._batches[index]

    def get(self, batch_id: str) -> FakeBatch:
        """The batch with this id (deleted ones too)."""
        for batch in self._batches:
            if batch.id == batch_id:
                return batch
        known = ", ".join(b.id for b in self._batches) or "none yet"
        raise ConfigurationError(
            f"groundswell.testing: this fake has no batch {batch_id!r} (it has: {known})"
        )

    def answer(self, custom_id: str, answer: Answer | str) -> FakeBatches:
        """Answer every batch request with this ``custom_id`` with ``answer``; returns self.

        E.g. ``fake.batches.answer("b", error(500))`` makes request ``b`` come
        back ``errored`` while the model answers the others.
        """
        self.answers[custom_id] = as_answer(answer, f"the answer for custom_id {custom_id!r}")
        return self

    def end(self, batch_id: str | None = None) -> None:
        """End a batch now (every unended one without ``batch_id``): answer what is left.

        A batch being canceled ends with its unanswered requests ``canceled``.
        """
        with self._lock:
            for batch in self._chosen(batch_id):
                if batch.processing_status == "in_progress":
                    self._process(batch, len(batch.requests))
                self._finish(batch, "canceled")  # only a canceling batch has any left

    def expire(self, batch_id: str | None = None) -> None:
        """End a batch now as its 24 hours running out would: unanswered requests ``expired``."""
        with self._lock:
            for batch in self._chosen(batch_id):
                self._finish(batch, "expired")

    def _chosen(self, batch_id: str | None) -> list[FakeBatch]:
        batches = [self.get(batch_id)] if batch_id is not None else self._batches
        return [b for b in batches if b.processing_status != "ended"]

    # -- processing -----------------------------------------------------------------

    def _process(self, batch: FakeBatch, upto: int) -> None:
        """Answer the batch's requests, in order, until ``upto`` of them have results."""
        for request in batch.requests[:upto]:
            custom_id = str(request.custom_id)
            if custom_id not in batch.results:
                batch.results[custom_id] = self._answer(request)

    def _answer(self, request: MessagesRequest) -> dict[str, Any]:
        body = request.body
        refused = None
        if body.get("stream"):
            refused = "stream: streaming is not supported for requests in a Message Batch"
        elif isinstance(body.get("max_tokens"), int) and body["max_tokens"] < 1:
            refused = "max_tokens: must be at least 1 for requests in a Message Batch"
        elif "messages" in body and not isinstance(body["messages"], list):
            refused = "messages: Input should be a valid list"
        answer: Answer | None = error(400, refused) if refused else self._refuse(body)
        if answer is None:  # accepted: recorded in fake.requests, then answered
            answer = self._respond(request, self.answers.get(str(request.custom_id)))
        if isinstance(answer, ErrorReply):
            return {"type": "errored", "error": answer.body()}
        if isinstance(answer, RawReply):
            return {"type": "succeeded", "message": answer.body}
        return {"type": "succeeded", "message": self._message(request, answer)}

    def _finish(self, batch: FakeBatch, rest: Literal["canceled", "expired"]) -> None:
        for custom_id in batch.custom_ids:
            batch.results.setdefault(custom_id, {"type": rest})
        batch.processing_status = "ended"
        batch.ended_at = datetime.now(UTC)

    def _poll(self, batch: FakeBatch) -> None:
        """A retrieve: the batch moves on (see the class docstring)."""
        if batch.processing_status == "canceling":
            self._finish(batch, "canceled")
        elif batch.processing_status == "in_progress" and self._polls is not None:
            batch.polls += 1
            if batch.polls > self._polls:
                self.end(batch.id)
            else:
                self._process(batch, len(batch.requests) * batch.polls // (self._polls + 1))

    # -- the endpoints --------------------------------------------------------------

    def handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, base: str
    ) -> Response:
        """Answer one request to ``/v1/messages/batches...``.

        ``headers`` are lower-cased, without the API key; ``base`` is the URL
        the client reached the fake at, for ``results_url``.
        """
        route, _, query = path.partition("?")
        parts = route.removeprefix(BATCHES).strip("/").split("/")
        with self._lock:
            if parts == [""]:
                if method == "POST":
                    return self._create(headers, raw)
                if method == "GET":
                    return self._list(parse_qs(query), base)
            elif len(parts) <= 2:
                batch = self._find(unquote(parts[0]))
                if batch is None:
                    return _error(error(404, f"message batch {parts[0]!r} not found"))
                action = (method, parts[1] if len(parts) == 2 else "")
                if action == ("GET", ""):
                    self._poll(batch)
                    return _json(self._view(batch, base))
                if action == ("POST", "cancel"):
                    return self._cancel(batch, base)
                if action == ("DELETE", ""):
                    return self._delete(batch)
                if action == ("GET", "results"):
                    return self._results(batch)
        return _error(error(404, f"no route for {method} {route}"))

    def _find(self, batch_id: str) -> FakeBatch | None:
        return next((b for b in self._batches if b.id == batch_id and not b.deleted), None)

    def _create(self, headers: dict[str, str], raw: bytes) -> Response:
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            return _error(error(400, f"request body is not JSON: {exc}"))
        problem = _requests_problem(body)
        if problem is not None:
            return _error(error(400, problem))
        batch = FakeBatch(
            id=new_id("msgbatch"),
            requests=[
                MessagesRequest(BATCHES, dict(headers), item["params"], item["custom_id"])
                for item in body["requests"]
            ],
            created_at=datetime.now(UTC),
        )
        self._batches.append(batch)
        return _json(self._view(batch, ""))

    def _list(self, query: dict[str, list[str]], base: str) -> Response:
        newest_first = [b for b in reversed(self._batches) if not b.deleted]
        ids = [b.id for b in newest_first]
        raw_limit = query.get("limit", ["20"])[-1]
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 1000:
            return _error(error(400, f"limit: must be an integer from 1 to 1000, got {raw_limit}"))
        limit = int(raw_limit)
        for key in ("after_id", "before_id"):
            if key in query and query[key][-1] not in ids:
                return _error(error(400, f"{key}: no message batch {query[key][-1]!r}"))
        if "before_id" in query:
            before = newest_first[: ids.index(query["before_id"][-1])]
            page, more = before[-limit:], len(before) > limit
        else:
            start = ids.index(query["after_id"][-1]) + 1 if "after_id" in query else 0
            page, more = newest_first[start : start + limit], len(newest_first) > start + limit
        return _json(
            {
                "data": [self._view(b, base) for b in page],
                "has_more": more,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
            }
        )

    def _cancel(self, batch: FakeBatch, base: str) -> Response:
        if batch.processing_status == "ended":
            return _error(
                error(400, f"message batch {batch.id!r} has ended; it can no longer be canceled")
            )
        if batch.processing_status == "in_progress":
            batch.processing_status = "canceling"
            batch.cancel_initiated_at = datetime.now(UTC)
        return _json(self._view(batch, base))

    def _delete(self, batch: FakeBatch) -> Response:
        if batch.processing_status != "ended":
            return _error(
                error(
                    400,
                    f"message batch {batch.id!r} is still processing; a batch can be deleted "
                    "only once it has ended (cancel it first)",
                )
            )
        batch.deleted = True
        return _json({"id": batch.id, "type": "message_batch_deleted"})

    def _results(self, batch: FakeBatch) -> Response:
        if batch.processing_status != "ended":
            return _error(
                error(400, f"message batch {batch.id!r} is still processing; no results yet")
            )
        # In the order sent; the real API promises no order, so match on custom_id.
        lines = [
            json.dumps({"custom_id": c, "result": batch.results[c]}) + "\n"
            for c in batch.custom_ids
        ]
        headers = {"content-type": "application/x-jsonl", "request-id": new_id("req")}
        return 200, headers, iter([line.encode() for line in lines])

    def _view(self, batch: FakeBatch, base: str) -> dict[str, Any]:
        """The batch as the API shows it (``MessageBatch``)."""
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        ended = batch.processing_status == "ended"
        if ended:  # requests count as processing until the whole batch ends
            for result in batch.results.values():
                counts[result["type"]] += 1
        else:
            counts["processing"] = len(batch.requests)
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.processing_status,
            "request_counts": counts,
            "ended_at": _rfc3339(batch.ended_at),
            "created_at": _rfc3339(batch.created_at),
            "expires_at": _rfc3339(batch.created_at + LIFETIME),
            "archived_at": None,
            "cancel_initiated_at": _rfc3339(batch.cancel_initiated_at),
            "results_url": f"{base}{BATCHES}/{batch.id}/results" if ended else None,
        }


def _requests_problem(body: Any) -> str | None:
    """What the API says of a create body it refuses (a 400), or None."""
    requests = body.get("requests") if isinstance(body, dict) else None
    if requests is None:
        return "requests: Field required"
    if not isinstance(requests, list):
        return "requests: Input should be a valid list"
    if not requests:
        return "requests: List should have at least 1 item after validation, not 0"
    if len(requests) > MAX_REQUESTS:
        return (
            f"requests: List should have at most {MAX_REQUESTS} items after validation, "
            f"not {len(requests)}"
        )
    seen: set[str] = set()
    for i, item in enumerate(requests):
        if not isinstance(item, dict):
            return f"requests.{i}: Input should be a valid dictionary"
        for key in ("custom_id", "params"):
            if key not in item:
                return f"requests.{i}.{key}: Field required"
        extra = sorted(set(item) - {"custom_id", "params"})
        if extra:
            return f"requests.{i}.{extra[0]}: Extra inputs are not permitted"
        custom_id = item["custom_id"]
        if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
            return f"requests.{i}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'"
        if custom_id in seen:
            return (
                f"requests.{i}.custom_id: {custom_id!r} is used by an earlier request; "
                "each request in a batch needs a unique custom_id"
            )
        seen.add(custom_id)
        if not isinstance(item["params"], dict):
            return f"requests.{i}.params: Input should be a valid dictionary"
    return None


def _json(body: dict[str, Any], status: int = 200) -> Response:
    headers = {"content-type": "application/json", "request-id": new_id("req")}
    return status, headers, iter([json.dumps(body).encode()])


def _error(reply: ErrorReply) -> Response:
    return _json(reply.body(), reply.status)
