"""The front end: a kernel's source, read once at decoration, becomes a type-independent
KernelSource and its region tree; the names kernels may use."""
