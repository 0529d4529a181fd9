"""Caching: Groundswell's answer and tool-result caches, and the API's prompt caching.

- `backends`: the backend protocol, canonical request keys, backend selection;
- `canonical`: canonical JSON (one text for equal values);
- `guard`, `inflight`: deadlines and a circuit breaker for backends, in-flight deduplication;
- `tool_results`: tool-result caching (keys, statistics, invalidation);
- `middleware`: the default middleware of both caches;
- `markers`, `prompt_cache`: the API's prompt caching (``cache_control``), and its middleware.
"""
