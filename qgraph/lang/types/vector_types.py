"""Small vector and matrix types (qgraph.vec3, qgraph.mat33, ...) and their functions.

In a kernel a vector is a handful of scalars in registers: lang.flat.flatten rewrites vector
code into per-component code before either backend sees it, so vectors cost exactly what
the same arithmetic written component by component costs. As an array's element type a
vector is a trailing dimension (`qgraph.ndarray(qgraph.vec3, (n,))` has shape (n, 3)).

Called from plain Python the types and functions work on NumPy arrays, so a kernel body
can be run and debugged on the host.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import as_dtype


class VectorValue(np.ndarray):
    """What `qgraph.vec3(...)` returns on the host: a NumPy array marked as one vector or
    matrix value. The mark is what lets a kernel take a module-level `GRAVITY =
    qgraph.vec2(0.0, -9.8)` as a constant vector (its components compiled in) and an
    unannotated argument `qgraph.vec2(...)` as a vector parameter, where a plain NumPy
    array is an array. Arithmetic on it gives marked values; reductions give scalars."""

    _qgraph_vector = True  # how the argument layer (below this one) recognises it

    def __array_wrap__(self, array, context=None, return_scalar=False):
        if return_scalar or array.ndim == 0:
            return array[()]
        return super().__array_wrap__(array, context, return_scalar)


def as_value(a) -> np.ndarray:
    """`a` marked as a vector value (a view, no copy)."""
    return np.asarray(a).view(VectorValue)


class VectorType:
    """A vector (shape (n,)) or matrix (shape (n, m)) of one dtype, 1 <= n, m <= 4.

    `vec3(x, y, z)`, `vec3(s)` (every component s), `vec3(v)` (a copy or a cast), and for
    matrices the n*m entries row by row, n row vectors, or one scalar; `mat33.identity()`.
    `vec3[:]` (and `vec3[:, :]`) annotate a kernel parameter as an array of vec3."""

    _qgraph_vector_type = True  # how the argument layer recognises the annotation `g: qgraph.vec2`

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, name: str) -> None:
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.size = int(np.prod(shape))

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2

    def __call__(self, *args) -> VectorValue:
        if not args:
            return as_value(np.zeros(self.shape, self.dtype))
        if len(args) == 1:
            return as_value(np.array(np.broadcast_to(np.asarray(args[0]), self.shape), dtype=self.dtype))
        if self.is_matrix and len(args) == self.shape[0]:
            return as_value(np.array([np.broadcast_to(np.asarray(r), self.shape[1:]) for r in args], dtype=self.dtype))
        if len(args) != self.size:
            raise TypeError(f"{self.name} takes 1 or {self.size} values, got {len(args)}")
        return as_value(np.array(args, dtype=self.dtype).reshape(self.shape))

    def identity(self) -> VectorValue:
        if not self.is_matrix or self.shape[0] != self.shape[1]:
            raise TypeError(f"{self.name}.identity(): only square matrices have an identity")
        return as_value(np.eye(self.shape[0], dtype=self.dtype))

    def __getitem__(self, dims) -> ArrayType:
        dims = dims if isinstance(dims, tuple) else (dims,)
        if not dims or not all(isinstance(d, slice) and d == slice(None) for d in dims):
            raise TypeError(f"annotate an array of {self.name} as {self.name}[:] (1-D) or {self.name}[:, :] (2-D)")
        return ArrayType(self, len(dims))

    def __repr__(self) -> str:
        return f"qgraph.{self.name}"


class ArrayType:
    """The annotation `qgraph.vec3[:]`: an array of `ndim` dimensions whose elements are vectors."""

    def __init__(self, element: VectorType, ndim: int) -> None:
        self.element = element
        self.ndim = ndim

    def __repr__(self) -> str:
        return f"{self.element!r}[{', '.join(':' * self.ndim)}]"


_TYPES: dict[tuple, VectorType] = {}


def _check_extent(n: object, what: str) -> int:
    if not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= 4:
        raise ValueError(f"{what} must be an int from 1 to 4, got {n!r}")
    return int(n)


def _type_name(shape: tuple[int, ...], dtype: np.dtype) -> str:
    suffix = "" if dtype == np.float32 else f"_{dtype.name}"
    return ("vec" if len(shape) == 1 else "mat") + "".join(map(str, shape)) + suffix


def vector(n: int, dtype=np.float32) -> VectorType:
    """The vector type of n components of `dtype` (qgraph.vec3 is vector(3, qgraph.f32))."""
    shape = (_check_extent(n, "vector length"),)
    dt = as_dtype(dtype, "vector dtype")
    key = (shape, dt)
    if key not in _TYPES:
        _TYPES[key] = VectorType(shape, dt, _type_name(shape, dt))
    return _TYPES[key]


def matrix(n: int, m: int, dtype=np.float32) -> VectorType:
    """The n x m matrix type of `dtype` (qgraph.mat33 is matrix(3, 3, qgraph.f32))."""
    shape = (_check_extent(n, "matrix rows"), _check_extent(m, "matrix columns"))
    dt = as_dtype(dtype, "matrix dtype")
    key = (shape, dt)
    if key not in _TYPES:
        _TYPES[key] = VectorType(shape, dt, _type_name(shape, dt))
    return _TYPES[key]


vec2, vec3, vec4 = vector(2), vector(3), vector(4)
mat22, mat33, mat44 = matrix(2, 2), matrix(3, 3), matrix(4, 4)
# float64 twins (Warp's vec3d): finite-difference checks and long accumulations want them
vec2d, vec3d, vec4d = vector(2, np.float64), vector(3, np.float64), vector(4, np.float64)
mat22d, mat33d, mat44d = matrix(2, 2, np.float64), matrix(3, 3, np.float64), matrix(4, 4, np.float64)


def element_of(obj: object) -> VectorType | None:
    """The vector type an array-element spelling names (qgraph.vec3), else None."""
    return obj if isinstance(obj, VectorType) else None


def type_of_value(value: object) -> VectorType | None:
    """The vector type of a vector value (`qgraph.vec2(...)`, module-level or an argument), else None."""
    if not is_vector_value(value):
        return None
    dtype = as_dtype(value.dtype, "vector dtype")
    return vector(value.shape[0], dtype) if value.ndim == 1 else matrix(*value.shape, dtype)


# --------------------------------------------------------------------------- functions (host versions)


def dot(a, b):
    """The dot product of two vectors."""
    return np.dot(np.asarray(a), np.asarray(b))


def cross(a, b):
    """The cross product of two 3-vectors (of two 2-vectors: the scalar z component)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape == (2,):
        return a[0] * b[1] - a[1] * b[0]
    return as_value(np.cross(a, b).astype(np.result_type(a, b)))


def norm(v):
    """The Euclidean length of a vector (Frobenius norm of a matrix)."""
    v = np.asarray(v)
    return v.dtype.type(np.sqrt(np.sum(v * v)))


def norm_sqr(v):
    """The squared Euclidean length (no square root)."""
    v = np.asarray(v)
    return v.dtype.type(np.sum(v * v))


def normalized(v):
    """`v / norm(v)`."""
    v = np.asarray(v)
    return as_value(v / norm(v))


def outer(a, b):
    """The outer product: the matrix a_i * b_j."""
    return as_value(np.outer(np.asarray(a), np.asarray(b)))


def trace(m):
    """The sum of a square matrix's diagonal."""
    return np.trace(np.asarray(m))


def transpose(m):
    """The transposed matrix."""
    return as_value(np.asarray(m).T.copy())


def determinant(m):
    """The determinant of a 2x2 or 3x3 matrix."""
    m = np.asarray(m)
    return m.dtype.type(np.linalg.det(m))


def inverse(m):
    """The inverse of a 2x2 or 3x3 matrix."""
    m = np.asarray(m)
    return as_value(np.linalg.inv(m).astype(m.dtype))


FUNCTIONS = {f.__name__: f for f in (dot, cross, norm, norm_sqr, normalized, outer, trace, transpose,
                                     determinant, inverse)}


def is_vector_shape(shape: tuple[int, ...]) -> bool:
    """A shape some qgraph vector or matrix type has: (n,) or (n, m), each extent 1 to 4."""
    return len(shape) in (1, 2) and all(1 <= n <= 4 for n in shape)


def is_vector_value(value: object) -> bool:
    """What `qgraph.vec2(...)` returns (VectorValue) with a vector or matrix shape.
    A plain NumPy array is an array argument, never a vector."""
    return getattr(type(value), "_qgraph_vector", False) and is_vector_shape(value.shape)


def is_vector_kind(kind: object) -> bool:
    """An argument kind (args.kinds) of a vector passed by value."""
    return getattr(kind, "is_vector", False)
