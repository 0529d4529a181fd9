"""The plugin registry: loading plugins and the typed collectors over the hook families.

- `manager`: loading (entry points, allow and deny lists), listing, isolation;
- `records`: which record type each ``register_*`` hook returns.

The hook specifications themselves are `groundswell.hookspecs`.
"""
