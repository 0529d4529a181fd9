"""``python -m groundswell.cli``: the ``groundswell`` command."""

import sys

from .main import main

sys.exit(main())
