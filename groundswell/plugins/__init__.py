"""The plugin registry: loading plugins and the typed collectors over the hook families.

- `manager`: loading entry points, listing, isolation, the typed collectors;
- `loading`: which plugins load (the kernel's own, the allow, deny and strict
  settings) and `PluginInfo`, what each one reports;
- `records`: which record type each ``register_*`` hook returns.

The hook specifications themselves are `groundswell.hookspecs`.
"""
