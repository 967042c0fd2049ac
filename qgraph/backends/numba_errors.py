"""numba's compile errors, said in a kernel writer's words: a one-line reason with the fix.

numba reports what its type inference could not do (`>>> setitem(array(float64, 1d, C),
int64, Literal[str](a))`, `Cannot unify float64 and Tuple(...) for 'v.2'`); qgraph's
QgraphSyntaxError leads with the sentence `explain` gives for that text and keeps numba's
own words after it. docs/troubleshooting.md lists each case ("When numba rejects the code")
and tests/backends/test_numba_errors.py checks every one.
"""

from __future__ import annotations

import re

_ARRAY = re.compile(r"^(?:readonly )?array\((\w+), (\d+)d, \w+\)$")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated parts of a numba type list (brackets nest)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k].strip())
            start = k + 1
    tail = text[start:].strip()
    return parts + [tail] if tail else parts


def _type_words(numba_type: str) -> str:
    """A numba type as a user would name it."""
    found = _ARRAY.match(numba_type)
    if found:
        return f"a {found.group(2)}-d {found.group(1)} array"
    literal = re.match(r"^Literal\[(\w+)\]\((.*)\)$", numba_type)
    if literal:
        return f"the {literal.group(1)} {literal.group(2)!r}" if literal.group(1) == "str" else \
            f"the {literal.group(1)} {literal.group(2)}"
    if numba_type.startswith(("UniTuple", "Tuple")):
        return "a tuple"
    if numba_type in ("none", "NoneType"):
        return "None"
    if numba_type.startswith("unicode_type"):
        return "a string"
    if numba_type.startswith(("list", "reflected list", "List")):
        return "a list"
    return numba_type


def _index_count(index_type: str) -> int:
    if index_type.startswith("UniTuple("):
        found = re.search(r" x (\d+)\)$", index_type)
        return int(found.group(1)) if found else 1
    if index_type.startswith("Tuple("):
        return len(_split_args(index_type[len("Tuple("):-1]))
    return 1


def _item_access(op: str, args: list[str]) -> str | None:
    array = _ARRAY.match(args[0]) if args else None
    if array is None and op == "getitem" and args and not args[0].startswith(("UniTuple", "Tuple")):
        return f"{_type_words(args[0])} is indexed, but only arrays (and tuples) can be; check the value's type"
    if array is None or len(args) < 2:
        return None
    dtype, ndim = array.group(1), int(array.group(2))
    count = _index_count(args[1])
    if count > ndim:
        return (f"{count} indices for a {ndim}-d array: index it with at most {ndim} "
                f"(x[i] for 1-d, x[i, j] for 2-d)")
    if re.search(r"float|complex", args[1]):
        return "an array index is a float: indices are integers; convert with int(...) (or math.floor)"
    if op == "setitem" and len(args) == 3:
        value = _type_words(args[2])
        if value == "None":
            return (f"the value stored into the {dtype} array is None: the expression returns nothing "
                    "(a call such as print(...) or a helper without `return`)")
        return (f"cannot store {value} into an element of a {dtype} array; store a number "
                f"(a {dtype}-compatible value)")
    return None


def _call(fn: str, args: list[str]) -> str:
    if any(_ARRAY.match(a) for a in args) and fn not in ("len", "getitem", "setitem"):
        return (f"{fn}() was given a whole array ({', '.join(_type_words(a) for a in args)}); kernels compute "
                "on numbers: index the array (x[i]) inside the loop; a vector value is qgraph.vec3(...) (also at "
                "module level), a vector parameter is annotated g: qgraph.vec3")
    words = ", ".join(_type_words(a) for a in args)
    return f"{fn}() does not accept ({words}) in a kernel; pass numbers of the types it takes"


_EXPLAINED = (
    (re.compile(r"Untyped global name '(?P<name>\w+)': Cannot determine Numba type of <class 'function'>"),
     lambda m: f"'{m['name']}' is a plain Python function: decorate it with @qgraph.func to call it from a kernel"),
    (re.compile(r"Untyped global name '(?P<name>\w+)': Cannot determine Numba type of <class '(?P<t>[\w.]+)'>"),
     lambda m: f"the global '{m['name']}' is a {m['t']}, which kernels cannot use: pass it as an argument "
               "(an array or a number)"),
    (re.compile(r"Unknown attribute '(?P<attr>\w+)' of type (?P<t>.+?)(?:$| \(|\s*$)"),
     lambda m: f"{_type_words(m['t'].strip())} has no attribute '{m['attr']}' in a kernel"),
    (re.compile(r"Cannot unify (?P<a>.+) and (?P<b>.+) for '(?P<var>\$?[\w.]+)'"),
     lambda m: (f"the two sides of a conditional expression have different types "
                f"({_type_words(m['a'])} and {_type_words(m['b'])}); give both the same type")
     if m["var"].startswith("$") else
     (f"'{m['var'].split('.')[0]}' is given values of two types ({_type_words(m['a'])} and "
      f"{_type_words(m['b'])}) on different paths; give it one type everywhere (for example 0.0, not 0)")),
)
_OPERATION = re.compile(r"^>>> (?P<fn>[\w.]+)\((?P<args>.*)\)$")


def explain(summary: str) -> str | None:
    """The reason and fix for numba's summary line of a compile error, or None if unknown."""
    summary = summary.strip()
    for pattern, say in _EXPLAINED:
        found = pattern.search(summary)
        if found:
            return say(found)
    operation = _OPERATION.match(summary)
    if operation:
        fn, args = operation["fn"], _split_args(operation["args"])
        if fn in ("getitem", "setitem"):
            item = _item_access(fn, args)
            if item is not None:
                return item
        return _call(fn, args)
    return None
