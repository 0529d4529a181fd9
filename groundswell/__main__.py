"""``python -m groundswell``: the ``groundswell`` command, for environments without the script."""

import sys

from .cli.main import main

sys.exit(main())
