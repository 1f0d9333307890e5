"""``python -m rkvoice.daemon``: the resident assistant without the rest of the CLI."""

import sys

from .entry import main

sys.exit(main())
