"""``python -m groundswell``: the ``groundswell`` command, for environments without the script."""

import sys

from .cli import main

sys.exit(main())
