"""The kernel language, in the order a kernel goes through it: front/ (source -> KernelSource,
at decoration), types/ (the type rules), flat/ (per signature: scalar code), lower/ (what both
generators share), cpu/ and cuda/ (the two code generators); generated.py runs generated code."""
