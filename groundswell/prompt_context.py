"""Old import path of `groundswell.context_providers`, kept so existing imports keep working.

The name is an alias of the same module object, so reading or patching an
attribute through either path sees the same value.
"""

from __future__ import annotations

import sys

from . import context_providers

sys.modules[__name__] = context_providers
