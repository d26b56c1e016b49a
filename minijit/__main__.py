"""``python -m minijit``: the minijit command line (see `minijit.cli`)."""

import sys

from minijit.cli import main

sys.exit(main())
