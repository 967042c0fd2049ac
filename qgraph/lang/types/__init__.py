"""The type rules: weak typing of Python numbers (NEP 50), @qgraph.func instances, and the
vector and matrix types."""
