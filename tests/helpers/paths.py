"""Where the checkout's pieces are, for tests at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: qgraph/, docs/, examples/, tests/
EXAMPLES = ROOT / "examples"
