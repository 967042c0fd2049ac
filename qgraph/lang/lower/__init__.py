"""What both code generators share: builtins and funcs lowered to generated names, element
updates, bounds, min/max, debug checks, Philox and the fingerprint of generated code."""
