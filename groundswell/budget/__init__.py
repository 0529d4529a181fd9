"""Tokens and dollars: token budgets, token counting, prices and context strategies.

- `pricing`: what model calls cost in USD (the price table, a run's spend);
- `tokens`: token counting (the offline estimate and plugin counters);
- `token_budget`: `TokenBudget` and the strategies that keep a prompt within it;
- `summary`: the ``summarize`` strategy's pure parts;
- `middleware`, `summarize`, `context_ttl`: the default middleware that enforce them.
"""
