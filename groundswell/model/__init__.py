"""The Messages API: what a request is made of, and calling it.

- `request_fields`: the request fields of the installed SDK (what Groundswell passes);
- `request_settings`, `settings_check`: the settings `Agent`, `Prompt` and
  `PromptOverrides` share, checked where they are given;
- `thinking_blocks`: what may change around thinking blocks in a conversation;
- `requests`: building a request (`build_request`);
- `output_types`: how a ``response_format`` is asked for and read back;
- `calls`: calling ``anthropic.AsyncAnthropic`` (one round trip, its errors);
- `retries`: retrying a failed request the SDK's way, ``Retry-After`` capped;
- `batching`, `batch_middleware`: model calls through the Message Batches API.
"""
