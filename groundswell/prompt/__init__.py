"""Prompts: `Prompt` and `PromptOverrides`, output extraction and context providers.

- `prompt`: prompts, templates and per-call overrides;
- `extraction`, `extraction_middleware`: ``Extract`` rules on an answer;
- `context_providers`, `context_middleware`: text added to the system prompt before a prompt.
"""
