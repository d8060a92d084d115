"""Reading framework optimizer-state pickles without running them, and MXNet's raw NDArray layout.

Gluon ``.states`` and Paddle ``.pdopt`` files are Python pickles. ``pickle.load``
runs whatever a file's REDUCE opcodes name, and even behind a restricted
``find_class`` the C unpickler calls the classes it is handed with arguments the
file chose: ``numpy.ndarray((), 'O', buffer)`` makes an object array whose
pointers come from the file. So `safe_loads` does not use the unpickler at all;
it is a small interpreter of the pickle opcodes (protocols 0 to 5) that:

* **calls nothing the file names.** A global resolves through an allow-list to a
  `_Recipe` of this module; REDUCE, NEWOBJ and BUILD on it run only that
  recipe's checked code, and BUILD on anything else is refused. INST, OBJ,
  persistent ids, extension codes and out-of-band buffers are refused.
* **builds numpy arrays only with a numeric dtype and exactly their bytes.**
  ``_reconstruct`` + BUILD (protocols 0-4) or ``_frombuffer`` (protocol 5),
  with ``len(raw) == prod(shape) * itemsize``; a dtype only from
  ``numpy.dtype(code)`` + a BUILD state describing a plain bool, integer,
  float or complex type. Object, structured and subarray dtypes, dtype flags,
  and an array never given its bytes (uninitialised memory) are refused.
* **bounds every size by the file.** The memo is a list while its indices
  come in order (as every pickler writes them: 8 bytes an entry), and a dict
  for the others (an index of 2**30 costs one entry); every length is checked against the bytes left before
  anything is allocated; everything the reader makes shares a budget of
  ``_BUDGET_FACTOR`` x the file's length (+ 1 MiB): arrays, decoded NDArrays
  and ``bytearray`` by their bytes, every Python object (container, string,
  number, record, memo entry, the copy `_finish` makes) by its
  ``sys.getsizeof``, every element added to a container by the container's
  growth, and each opcode by a stack slot. A row-sparse NDArray stays
  sparse (`RowSparse`) until its shape has been checked against a parameter.
* **walks nothing as a tree.** Each tuple (and frozenset) records, when it
  is built, its depth and how many tuples hashing it visits; a tuple deeper
  than ``_MAX_DEPTH`` is refused when built, and nothing visiting more than
  ``_MAX_KEY_NODES`` is used as a dict key or set item, so no hash (which
  CPython computes by recursion, on the C stack) can overflow the stack or
  run for 2**64 steps on a graph of shared tuples (``DUP`` + ``TUPLE2``).
  `_finish` walks the graph once (memoised by identity), and messages show
  a value only through `short` (a bounded repr).
* **fails only with** `MigrateError` (`UnsafePickleError` for a forbidden
  construct), naming the file, the opcode offset and what was wrong; the
  result is plain Python values, numpy arrays and `PickledObject` records,
  acyclic and at most ``_MAX_DEPTH`` deep.

It is pure Python: about 2 us an opcode, and an optimizer-state file has a few
thousand opcodes however large its arrays (each array is one bytes opcode).
"""
from __future__ import annotations

import codecs
import struct
import sys
from typing import Any, Iterable

import numpy as np

from .._files import read_regular
from ._errors import MigrateError, UnsafePickleError
from ._ndarray import Budget, RowSparse, decode_ndarray
from ._recipes import (BASIC_GLOBALS, MXNET_GLOBALS, NUMPY_GLOBALS, MXNDArray, PickledObject, _Dtype, _MX_NDARRAY,
                       _NDArrayRecipe, _Pending, _Recipe, _Reconstruct, record_class)

__all__ = ["MigrateError", "UnsafePickleError", "PickledObject", "MXNDArray", "RowSparse", "safe_loads",
           "decode_ndarray", "record_class", "MXNET_GLOBALS", "NUMPY_GLOBALS"]

_BUDGET_FACTOR = 4          # copies beyond the file: at most 4 x its length + 1 MiB
_BUDGET_SLACK = 1 << 20
_MAX_DEPTH = 100            # nesting of containers in the result
_MAX_INT_BYTES = 64         # LONG1/LONG4/text ints: state files hold counts, not bignums
_MAX_KEY_NODES = 256        # tuples visited hashing one dict key or set item (state files key by int/str)
_SLOT = 8                   # bytes of one stack, list or tuple slot
_ENTRY = 64                 # bytes of one entry of the reader's own bookkeeping dicts (shapes, _finish)
_ARRAY_HEADER = 112         # a numpy array object, beyond its data (charged where the data is)



class _Mark:
    __slots__ = ()


_MARK = _Mark()


class _Machine:
    """One run over one pickle: ``run()`` returns the unpickled value."""

    def __init__(self, data: bytes, what: str, table: dict):
        self.data, self.what, self.table = data, what, table
        self.pos = 0
        self.stack: list = []
        self.memo: list = []                      # entries 0, 1, 2, ... as picklers write them
        self.memo_far: dict[int, Any] = {}        # any other index
        self.budget = Budget(_BUDGET_FACTOR * len(data) + _BUDGET_SLACK)
        # id -> (tuple or frozenset, depth, tuples its hash visits), for those holding
        # a tuple or frozenset; the entry keeps the object alive, so its id stays its own.
        # Every tuple is made by make_tuple: one without an entry holds none (depth 1).
        self.shapes: dict[int, tuple] = {}

    # -- what the reader allocates -------------------------------------------
    def charge(self, nbytes: int):
        self.budget.take(nbytes, f"{self.what} (at byte {self.pos})")

    def new(self, obj):
        """Pushes a newly made object, charged by its size."""
        self.charge(sys.getsizeof(obj))
        self.stack.append(obj)

    def grow(self, container, add, per_item: int = 0):
        """Runs ``add()``, which adds to ``container``, and charges twice the
        growth (a resize holds the old table and the new one at once) and
        ``per_item`` for each item added."""
        before, n = sys.getsizeof(container), len(container)
        add()
        self.charge(2 * max(0, sys.getsizeof(container) - before) + per_item * (len(container) - n))

    # -- tuples: depth and hashing cost, known when built ------------------------
    def shape_of(self, x) -> tuple[int, int]:
        """(depth, tuples visited to hash it) of a value; containers other than
        tuples and frozensets count 1 (hashing one fails, or is cached)."""
        if type(x) is tuple or type(x) is frozenset:
            entry = self.shapes.get(id(x))
            return (entry[1], entry[2]) if entry is not None else (1, 1)
        return (1, 1) if isinstance(x, (list, dict, set)) else (0, 1)

    def _record(self, obj, depth: int, nodes: int):
        if depth > _MAX_DEPTH:
            raise MigrateError(f"{self.what}: tuples nested more than {_MAX_DEPTH} deep (at byte {self.pos}); "
                               "a state file never is.")
        self.charge(sys.getsizeof(obj))
        if depth > 1:
            self.charge(_ENTRY)
            self.shapes[id(obj)] = (obj, depth, nodes)

    def make_tuple(self, items) -> tuple:
        t = tuple(items)
        depth, nodes = 1, 1
        for c in t:
            if type(c) is tuple or type(c) is frozenset:
                d, n = self.shape_of(c)
                depth, nodes = max(depth, d + 1), min(nodes + n, 1 << 62)
        self._record(t, depth, nodes)
        return t

    def make_frozenset(self, items) -> frozenset:
        for x in items:
            self.hashable(x, "a frozenset item")
        s = frozenset(items)
        self._record(s, 1 + max((self.shape_of(c)[0] for c in s), default=0), 1)  # hash: items' cached ones
        return s

    def hashable(self, x, what: str):
        """Refuses ``x`` as a dict key or set item when hashing it would visit
        more than ``_MAX_KEY_NODES`` tuples (deep, or a graph of shared ones)."""
        nodes = self.shape_of(x)[1]
        if nodes > _MAX_KEY_NODES:
            raise MigrateError(f"{self.what}: {what} at byte {self.pos} is a tuple whose hash would visit more "
                               f"than {_MAX_KEY_NODES} tuples (nested, or shared through DUP/memo); a state "
                               "file's keys are numbers and strings.")

    # -- reading the stream --------------------------------------------------
    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MigrateError(f"{self.what}: the pickle is truncated (an opcode at byte {self.pos} needs "
                               f"{n} more bytes; {len(self.data) - self.pos} are left).")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise MigrateError(f"{self.what}: the pickle is truncated (a text opcode has no end of line).")
        out = self.data[self.pos:end]
        self.pos = end + 1
        return out

    # -- the stack -----------------------------------------------------------
    def pop(self):
        if not self.stack or self.stack[-1] is _MARK:
            raise MigrateError(f"{self.what}: corrupt pickle (stack underflow at byte {self.pos}).")
        return self.stack.pop()

    def pop_mark(self) -> list:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                items = self.stack[i + 1:]
                del self.stack[i:]
                return items
        raise MigrateError(f"{self.what}: corrupt pickle (no MARK at byte {self.pos}).")

    def top(self, kind, opname: str):
        if not self.stack or not isinstance(self.stack[-1], kind):
            got = type(self.stack[-1]).__name__ if self.stack else "nothing"
            raise UnsafePickleError(f"{self.what}: {opname} on a {got} at byte {self.pos}; a state file only "
                                    "fills lists, dicts and sets this way.")
        return self.stack[-1]

    def global_(self, module, name):
        if not (isinstance(module, str) and isinstance(name, str)):
            raise UnsafePickleError(f"{self.what}: a global named by non-text.")
        recipe = self.table.get((module, name))
        if recipe is None:
            raise UnsafePickleError(
                f"{self.what}: refusing to load the global '{module}.{name}' named in the pickle. "
                "These state files only hold framework arrays, optimizer/scheduler records and numpy "
                "arrays; anything else could run code, so nothing was executed. If the file is "
                "genuine, report the class.")
        return recipe

    def int_from_text(self, text: bytes) -> int:
        text = text.rstrip(b"L")
        if len(text) > 3 * _MAX_INT_BYTES:
            raise MigrateError(f"{self.what}: an integer of {len(text)} digits; not a state file.")
        return int(text)

    def long(self, n: int) -> int:
        if n > _MAX_INT_BYTES:
            raise MigrateError(f"{self.what}: an integer of {n} bytes; not a state file.")
        return int.from_bytes(self.read(n), "little", signed=True)

    def text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MigrateError(f"{self.what}: text at byte {self.pos} is not UTF-8.") from None

    def recipe_call(self, opname: str, kwargs=None):
        args = self.pop()
        fn = self.pop()
        if not isinstance(fn, _Recipe):
            raise UnsafePickleError(f"{self.what}: {opname} on a {type(fn).__name__}; only allowed globals "
                                    "can be called.")
        if not isinstance(args, tuple) or kwargs:
            raise UnsafePickleError(f"{self.what}: {opname} with arguments that are not a plain tuple.")
        out = fn.reduce(args, self) if opname == "REDUCE" else fn.newobj(args, self)
        self.charge(_object_size(out))
        self.stack.append(out)

    def build(self):
        state = self.pop()
        obj = self.pop() if self.stack else None
        if isinstance(obj, PickledObject):
            self.grow(obj.attrs, lambda: obj._build(state))
        elif isinstance(obj, _Pending) and obj.recipe is _MX_NDARRAY:
            _NDArrayRecipe.build(obj, state, self)
        elif isinstance(obj, _Pending) and isinstance(obj.recipe, _Reconstruct):
            _Reconstruct.build(obj, state, self)
        elif isinstance(obj, _Pending) and isinstance(obj.recipe, _Dtype):
            _Dtype.build(obj, state)
        elif isinstance(obj, _Recipe):
            raise UnsafePickleError(f"{self.what}: BUILD on {obj.name} at byte {self.pos}: the pickle tries "
                                    "to modify an allowed function; not a state file.")
        else:
            raise UnsafePickleError(f"{self.what}: BUILD on a {type(obj).__name__} at byte {self.pos}: "
                                    "the pickle tries to modify something a state file never sets.")
        self.stack.append(obj)

    def run(self):
        ops = _OPS
        budget, stack = self.budget, self.stack
        while True:
            if 2 * _SLOT * len(stack) > budget.left:  # the stack itself (DUP, memo gets), and its resize
                self.charge(2 * _SLOT * len(stack))
            op = self.read(1)
            handler = ops.get(op)
            if handler is None:
                raise UnsafePickleError(f"{self.what}: opcode {op!r} at byte {self.pos - 1} is not allowed in "
                                        "a state file (or the file is not a pickle).")
            if handler(self) is _STOP:
                break
        result = self.pop()
        return _finish(result, self.what, self)


_STOP = object()


def _object_size(x) -> int:
    """Bytes of what a recipe returned, beyond array data (charged when made)."""
    n = sys.getsizeof(x) if not isinstance(x, np.ndarray) else _ARRAY_HEADER
    if isinstance(x, PickledObject):
        n += sys.getsizeof(x.__dict__) + sys.getsizeof(x.attrs)
    elif isinstance(x, MXNDArray):
        n += sys.getsizeof(x.__dict__) + _ARRAY_HEADER
    elif isinstance(x, _Pending):
        n += _ARRAY_HEADER
    return n


def _memo_put(m: _Machine, key: int):
    if not m.stack or m.stack[-1] is _MARK:
        raise MigrateError(f"{m.what}: corrupt pickle (memo of nothing at byte {m.pos}).")
    value = m.stack[-1]
    if key < len(m.memo):
        m.memo[key] = value
    elif key == len(m.memo):
        m.memo_far.pop(key, None)
        m.grow(m.memo, lambda: m.memo.append(value))
    else:
        m.grow(m.memo_far, lambda: m.memo_far.__setitem__(key, value), per_item=32)  # the key, an int


def _memo_get(m: _Machine, key: int):
    if key < len(m.memo):
        m.stack.append(m.memo[key])
    elif key in m.memo_far:
        m.stack.append(m.memo_far[key])
    else:
        raise MigrateError(f"{m.what}: corrupt pickle (memo entry {key} was never stored).")


def _memoize(m: _Machine):
    _memo_put(m, len(m.memo) + len(m.memo_far))  # MEMOIZE: the next index, as pickle's memo length


def _setitems(m: _Machine, items: list):
    if len(items) % 2:
        raise MigrateError(f"{m.what}: corrupt pickle (odd SETITEMS).")
    d = m.top(dict, "SETITEMS")
    for k in items[::2]:
        if not isinstance(k, (str, int, float, bytes, tuple, type(None))):
            raise MigrateError(f"{m.what}: a dict key of type {type(k).__name__}.")
        m.hashable(k, "a dict key")

    def add():
        for k, v in zip(items[::2], items[1::2]):
            d[k] = v
    try:
        m.grow(d, add)
    except TypeError:
        raise MigrateError(f"{m.what}: an unhashable dict key.") from None


def _frame(m: _Machine):
    n = m.unpack("<Q")
    if n > len(m.data) - m.pos:
        raise MigrateError(f"{m.what}: the pickle is truncated (a frame of {n} bytes, "
                           f"{len(m.data) - m.pos} left).")


def _string(m: _Machine):
    raw = m.line()
    if len(raw) < 2 or raw[0] != raw[-1] or raw[:1] not in (b"'", b'"'):
        raise MigrateError(f"{m.what}: corrupt STRING opcode.")
    m.new(codecs.escape_decode(raw[1:-1])[0].decode("latin-1"))


def _int_text(m: _Machine):
    raw = m.line()
    m.new({b"00": False, b"01": True}.get(raw) if raw in (b"00", b"01") else m.int_from_text(raw))


def _unicode_text(m: _Machine):
    m.new(m.line().decode("raw-unicode-escape"))


def _tuple_n(n):
    return lambda m: m.stack.append(m.make_tuple([m.pop() for _ in range(n)][::-1]))


def _append(m: _Machine):
    v = m.pop()
    lst = m.top(list, "APPEND")
    m.grow(lst, lambda: lst.append(v))


def _appends(m: _Machine):
    items = m.pop_mark()
    lst = m.top(list, "APPENDS")
    m.grow(lst, lambda: lst.extend(items))


def _additems(m: _Machine):
    items = m.pop_mark()
    s = m.top(set, "ADDITEMS")
    for x in items:
        m.hashable(x, "a set item")
    try:
        m.grow(s, lambda: s.update(items))
    except TypeError:
        raise MigrateError(f"{m.what}: an unhashable set item.") from None


def _list_from_mark(m: _Machine):
    items = m.pop_mark()
    m.new(items)


def _dict_from_mark(m: _Machine):
    items = m.pop_mark()
    m.new({})
    _setitems(m, items)


def _refuse(what: str):
    def handler(m: _Machine):
        raise UnsafePickleError(f"{m.what}: the pickle uses {what} (at byte {m.pos - 1}); a state file never "
                                "does, and it could construct arbitrary objects.")
    return handler


def _len_bytes(fmt: str, kind):
    def handler(m: _Machine):
        raw = m.read(m.unpack(fmt))
        m.new(kind(raw, m) if kind else raw)
    return handler


def _stack_global(m: _Machine):
    name = m.pop()
    module = m.pop()
    m.stack.append(m.global_(module, name))


def _global_text(m: _Machine):
    module = m.text(m.line())
    name = m.text(m.line())
    m.stack.append(m.global_(module, name))


def _newobj_ex(m: _Machine):
    kwargs = m.pop()
    if not isinstance(kwargs, dict):
        raise UnsafePickleError(f"{m.what}: NEWOBJ_EX with keywords that are not a dict.")
    m.recipe_call("NEWOBJ", kwargs)


def _bytearray8(m: _Machine):
    raw = m.read(m.unpack("<Q"))
    m.budget.take(len(raw), "bytearray")
    m.stack.append(bytearray(raw))


def _frozenset(m: _Machine):
    items = m.pop_mark()
    try:
        m.stack.append(m.make_frozenset(items))
    except TypeError:
        raise MigrateError(f"{m.what}: an unhashable set item.") from None


def _dup(m: _Machine):
    value = m.pop()
    m.stack += [value, value]


def _proto(m: _Machine):
    if m.read(1)[0] > 5:
        raise MigrateError(f"{m.what}: pickle protocol above 5.")


_OPS: dict[bytes, Any] = {
    b"\x80": _proto, b"\x95": _frame, b".": lambda m: _STOP,
    b"(": lambda m: m.stack.append(_MARK), b"0": lambda m: m.pop(), b"1": lambda m: m.pop_mark(),
    b"2": _dup,
    # scalars
    b"N": lambda m: m.stack.append(None), b"\x88": lambda m: m.stack.append(True),
    b"\x89": lambda m: m.stack.append(False),
    b"I": _int_text, b"L": lambda m: m.new(m.int_from_text(m.line())),
    b"J": lambda m: m.new(m.unpack("<i")), b"K": lambda m: m.stack.append(m.unpack("<B")),  # cached ints
    b"M": lambda m: m.new(m.unpack("<H")),
    b"\x8a": lambda m: m.new(m.long(m.unpack("<B"))),
    b"\x8b": lambda m: m.new(m.long(m.unpack("<I"))),
    b"F": lambda m: m.new(float(m.line())), b"G": lambda m: m.new(m.unpack(">d")),
    # text and bytes
    b"S": _string, b"V": _unicode_text,
    b"T": _len_bytes("<I", lambda raw, m: raw.decode("latin-1")),
    b"U": _len_bytes("<B", lambda raw, m: raw.decode("latin-1")),
    b"X": _len_bytes("<I", lambda raw, m: m.text(raw)), b"\x8c": _len_bytes("<B", lambda raw, m: m.text(raw)),
    b"\x8d": _len_bytes("<Q", lambda raw, m: m.text(raw)),
    b"B": _len_bytes("<I", None), b"C": _len_bytes("<B", None), b"\x8e": _len_bytes("<Q", None),
    b"\x96": _bytearray8,
    # containers
    b")": lambda m: m.stack.append(()), b"t": lambda m: m.stack.append(m.make_tuple(m.pop_mark())),
    b"\x85": _tuple_n(1), b"\x86": _tuple_n(2), b"\x87": _tuple_n(3),
    b"]": lambda m: m.new([]), b"l": _list_from_mark,
    b"a": _append, b"e": _appends,
    b"}": lambda m: m.new({}), b"d": _dict_from_mark,
    b"s": lambda m: _setitems(m, [m.pop(), m.pop()][::-1]), b"u": lambda m: _setitems(m, m.pop_mark()),
    b"\x8f": lambda m: m.new(set()), b"\x90": _additems, b"\x91": _frozenset,
    # memo
    b"p": lambda m: _memo_put(m, m.int_from_text(m.line())), b"q": lambda m: _memo_put(m, m.unpack("<B")),
    b"r": lambda m: _memo_put(m, m.unpack("<I")), b"\x94": _memoize,
    b"g": lambda m: _memo_get(m, m.int_from_text(m.line())), b"h": lambda m: _memo_get(m, m.unpack("<B")),
    b"j": lambda m: _memo_get(m, m.unpack("<I")),
    # globals and construction: only through recipes
    b"c": _global_text, b"\x93": _stack_global,
    b"R": lambda m: m.recipe_call("REDUCE"), b"\x81": lambda m: m.recipe_call("NEWOBJ"), b"\x92": _newobj_ex,
    b"b": lambda m: m.build(),
    # never in a state file
    b"i": _refuse("INST"), b"o": _refuse("OBJ"), b"P": _refuse("persistent ids"),
    b"Q": _refuse("persistent ids"), b"\x82": _refuse("extension codes"), b"\x83": _refuse("extension codes"),
    b"\x84": _refuse("extension codes"), b"\x97": _refuse("out-of-band buffers"),
    b"\x98": _refuse("out-of-band buffers"),
}


def _finish(obj, what: str, m: _Machine):
    """The result with every pending object replaced by what BUILD made, checked
    to be acyclic, at most ``_MAX_DEPTH`` deep, and free of internals.

    Each object is visited once (memoised by identity: a graph of shared
    tuples stays a graph, walked in linear time). Lists, dicts and records
    are the reader's own and are updated in place; a tuple or set is copied
    only when an item changed, and the copy is charged to ``m``'s budget."""
    done: dict[int, Any] = {}
    active: set[int] = set()

    def walk(x, depth) -> Any:
        if isinstance(x, (str, bytes, int, float, complex, type(None), np.ndarray, np.generic)):
            return x
        key = id(x)
        if key in done:
            return done[key]
        if key in active:
            raise MigrateError(f"{what}: the pickle is self-referential; a state file never is.")
        if depth > _MAX_DEPTH:
            raise MigrateError(f"{what}: the pickle is nested more than {_MAX_DEPTH} deep.")
        active.add(key)
        out = x
        if isinstance(x, _Pending):
            if not x.built:
                raise UnsafePickleError(f"{what}: an array was never given its data ({x.recipe.name} "
                                        "without BUILD); refusing uninitialised memory.")
            out = x.value
        elif isinstance(x, (bytearray, MXNDArray, RowSparse)):
            pass
        elif isinstance(x, (tuple, set, frozenset)):
            items = [walk(c, depth + 1) for c in x]
            if any(a is not b for a, b in zip(items, x)):
                out = type(x)(items)
                m.charge(sys.getsizeof(out))
        elif isinstance(x, list):
            for i, c in enumerate(x):
                x[i] = walk(c, depth + 1)
        elif isinstance(x, dict):
            _walk_dict(x, walk, depth)
        elif isinstance(x, PickledObject):
            _walk_dict(x.attrs, walk, depth)
            x.args = walk(x.args, depth + 1)
        else:  # a recipe or a mark left as a value
            raise UnsafePickleError(f"{what}: the pickle returns {getattr(x, 'name', type(x).__name__)} "
                                    "itself; not a state file.")
        active.discard(key)
        m.charge(_ENTRY)
        done[key] = out
        return out

    return walk(obj, 1)  # the top level is 1 deep, as `_Machine.make_tuple` counts a tuple's depth


def _walk_dict(d: dict, walk, depth: int):
    """``d`` with its values walked, in place; its keys too (rebuilt only when one changed)."""
    rekey = False
    for k in d:
        rekey |= walk(k, depth + 1) is not k
        d[k] = walk(d[k], depth + 1)
    if rekey:
        items = [(walk(k, depth + 1), v) for k, v in d.items()]
        d.clear()
        d.update(items)


def safe_loads(data: bytes, what: str, allowed: Iterable[dict] = (MXNET_GLOBALS, NUMPY_GLOBALS)) -> Any:
    """Unpickles ``data`` without calling anything it names (see the module
    docstring), resolving globals only through ``allowed`` (dicts of
    ``(module, name) -> recipe``) plus bytearray and the protocol-0 helpers.

    Raises `UnsafePickleError` for a global outside the allow-list or a
    construct a state file never needs, `MigrateError` for anything else
    wrong with the stream (truncated, corrupt, too large for its length).
    """
    table = dict(BASIC_GLOBALS)
    for extra in allowed:
        table.update(extra)
    return run_reporting(_Machine(bytes(data), what, table), what)


def run_reporting(machine: "_Machine", what: str):
    """``machine.run()``, every failure a `MigrateError` that names the file ``what``."""
    try:
        return machine.run()
    except MigrateError as err:
        if not str(err).startswith(what):  # a recipe's message: name the file
            raise type(err)(f"{what}: {err}") from None
        raise
    except (struct.error, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            MemoryError, RecursionError, UnicodeError) as err:
        raise MigrateError(f"{what}: cannot read the pickle ({type(err).__name__}: {err}); the file is "
                           "truncated or not an optimizer-state file.") from None


def read_bytes(fname, who: str) -> tuple[bytes, str]:
    """The bytes of ``fname`` (a path as str, bytes or os.PathLike, or an open
    binary file) and a label for messages; `MigrateError` for a FIFO, a device
    or a directory (refused before a byte is read) or a text-mode file."""
    return read_regular(fname, who, lambda label, why: MigrateError(why))
