"""How long an array may be before its indices need 64 bits on CUDA: the argument kinds record it,
the CUDA generator's index ranges rely on it."""

INDEX_HEADROOM = 1 << 16  # what literals may add to an extent in a 32-bit index (lang.cuda.index_ranges)
LARGE = (1 << 31) - INDEX_HEADROOM  # arrays of this many elements, or an extent this long, index in 64 bits on CUDA
MAX_EXTENT = LARGE - 1  # the longest extent of an array that is not large
