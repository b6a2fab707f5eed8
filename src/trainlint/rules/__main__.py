"""`python -m trainlint.rules`: rewrite rules/catalog.json from the rules on disk."""

import sys

from .catalog import main

sys.exit(main())
