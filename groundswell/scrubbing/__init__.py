"""Secrets never leave a run: the scrubber every output passes through.

- `scrubber`: the secret scrubber (registered secrets, secret-looking keys and values);
- `serialize`: JSON-safe snapshots of user values, with secrets redacted;
- `sdk_logs`: the SDK's own loggers scrubbed while Groundswell is imported.
"""
