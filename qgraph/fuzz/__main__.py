"""`python -m qgraph.fuzz`: see qgraph/fuzz/cli.py."""

import sys

from .cli import main

sys.exit(main())
