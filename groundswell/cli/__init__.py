"""The ``groundswell`` command.

- `main`: the commands and their options (``groundswell plugins``, ``run``, ``tree``...);
- `run`, `interrupt`: what ``groundswell run`` needs (finding and checking the workflow,
  building its arguments) and how it stops on Ctrl-C without losing anything;
- `waits`: ``groundswell pending``, ``approve``, ``reject`` and ``answer``;
- `examples`: finding and running the canonical examples.

Plugins add commands through the ``register_cli_commands`` hook.
"""

from .main import main

__all__ = ["main"]
