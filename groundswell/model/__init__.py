"""The Messages API: what a request is made of, and calling it.

- `request_fields`: the request fields of the installed SDK (what Groundswell passes);
- `request_settings`, `settings_check`: the settings `Agent`, `Prompt` and
  `PromptOverrides` share, checked where they are given;
- `thinking_blocks`: what may change around thinking blocks in a conversation;
- `calls`: building a request and calling ``anthropic.AsyncAnthropic``;
- `retries`: retrying a failed request the SDK's way, ``Retry-After`` capped;
- `batching`, `batch_middleware`: model calls through the Message Batches API.
"""
