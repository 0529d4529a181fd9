"""Old import path of `groundswell.run_context`, kept so existing imports keep working.

The name is an alias of the same module object, so reading or patching an
attribute through either path sees the same value.
"""

from __future__ import annotations

import sys

from . import run_context

sys.modules[__name__] = run_context
