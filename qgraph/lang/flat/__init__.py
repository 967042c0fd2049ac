"""Per signature, before either code generator: structs, vectors, funcs, random draws and vector
atomics become scalar code."""
