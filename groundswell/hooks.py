"""Old import path of `groundswell.claude_hooks`, kept so existing imports keep working.

The name is an alias of the same module object, so reading or patching an
attribute through either path sees the same value.
"""

from __future__ import annotations

import sys

from . import claude_hooks

sys.modules[__name__] = claude_hooks
