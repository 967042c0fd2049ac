"""`python -m qgraph`: see qgraph.cli."""

import sys

from .cli import main

sys.exit(main())
