"""`python -m qgraph`: see qgraph.cli.main."""

import sys

from .cli.main import main

sys.exit(main())
