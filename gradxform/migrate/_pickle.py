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
* **bounds every size by the file.** The memo is a dict (an index of 2**30
  costs one entry); every length is checked against the bytes left before
  anything is allocated; copies the reader makes beyond the file's own bytes
  (arrays, decoded NDArrays, ``bytearray``) share a budget of
  ``_BUDGET_FACTOR`` x the file's length (+ 1 MiB). A row-sparse NDArray stays
  sparse (`RowSparse`) until its shape has been checked against a parameter.
* **fails only with** `MigrateError` (`UnsafePickleError` for a forbidden
  construct), naming the file, the opcode offset and what was wrong; the
  result is plain Python values, numpy arrays and `PickledObject` records,
  acyclic and at most ``_MAX_DEPTH`` deep.

It is pure Python: about 2 us an opcode, and an optimizer-state file has a few
thousand opcodes however large its arrays (each array is one bytes opcode).
"""
from __future__ import annotations

import codecs
import os
import struct
from typing import Any, Iterable

import numpy as np

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



class _Mark:
    __slots__ = ()


_MARK = _Mark()


class _Machine:
    """One run over one pickle: ``run()`` returns the unpickled value."""

    def __init__(self, data: bytes, what: str, table: dict):
        self.data, self.what, self.table = data, what, table
        self.pos = 0
        self.stack: list = []
        self.memo: dict[int, Any] = {}
        self.budget = Budget(_BUDGET_FACTOR * len(data) + _BUDGET_SLACK)

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
        self.stack.append(fn.reduce(args, self) if opname == "REDUCE" else fn.newobj(args, self))

    def build(self):
        state = self.pop()
        obj = self.pop() if self.stack else None
        if isinstance(obj, PickledObject):
            obj._build(state)
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
        while True:
            op = self.read(1)
            handler = ops.get(op)
            if handler is None:
                raise UnsafePickleError(f"{self.what}: opcode {op!r} at byte {self.pos - 1} is not allowed in "
                                        "a state file (or the file is not a pickle).")
            if handler(self) is _STOP:
                break
        result = self.pop()
        return _finish(result, self.what)


_STOP = object()


def _memo_put(m: _Machine, key: int):
    if not m.stack or m.stack[-1] is _MARK:
        raise MigrateError(f"{m.what}: corrupt pickle (memo of nothing at byte {m.pos}).")
    m.memo[key] = m.stack[-1]


def _memo_get(m: _Machine, key: int):
    if key not in m.memo:
        raise MigrateError(f"{m.what}: corrupt pickle (memo entry {key} was never stored).")
    m.stack.append(m.memo[key])


def _setitems(m: _Machine, items: list):
    if len(items) % 2:
        raise MigrateError(f"{m.what}: corrupt pickle (odd SETITEMS).")
    d = m.top(dict, "SETITEMS")
    for k, v in zip(items[::2], items[1::2]):
        if not isinstance(k, (str, int, float, bytes, tuple, type(None))):
            raise MigrateError(f"{m.what}: a dict key of type {type(k).__name__}.")
        try:
            d[k] = v
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
    m.stack.append(codecs.escape_decode(raw[1:-1])[0].decode("latin-1"))


def _int_text(m: _Machine):
    raw = m.line()
    m.stack.append({b"00": False, b"01": True}.get(raw) if raw in (b"00", b"01") else m.int_from_text(raw))


def _unicode_text(m: _Machine):
    m.stack.append(m.line().decode("raw-unicode-escape"))


def _tuple_n(n):
    return lambda m: m.stack.append(tuple(m.pop() for _ in range(n))[::-1])


def _append(m: _Machine):
    v = m.pop()
    m.top(list, "APPEND").append(v)


def _appends(m: _Machine):
    items = m.pop_mark()
    m.top(list, "APPENDS").extend(items)


def _additems(m: _Machine):
    items = m.pop_mark()
    s = m.top(set, "ADDITEMS")
    try:
        s.update(items)
    except TypeError:
        raise MigrateError(f"{m.what}: an unhashable set item.") from None


def _dict_from_mark(m: _Machine):
    items = m.pop_mark()
    m.stack.append({})
    _setitems(m, items)


def _refuse(what: str):
    def handler(m: _Machine):
        raise UnsafePickleError(f"{m.what}: the pickle uses {what} (at byte {m.pos - 1}); a state file never "
                                "does, and it could construct arbitrary objects.")
    return handler


def _len_bytes(fmt: str, kind):
    def handler(m: _Machine):
        raw = m.read(m.unpack(fmt))
        m.stack.append(kind(raw, m) if kind else raw)
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
        m.stack.append(frozenset(items))
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
    b"I": _int_text, b"L": lambda m: m.stack.append(m.int_from_text(m.line())),
    b"J": lambda m: m.stack.append(m.unpack("<i")), b"K": lambda m: m.stack.append(m.unpack("<B")),
    b"M": lambda m: m.stack.append(m.unpack("<H")),
    b"\x8a": lambda m: m.stack.append(m.long(m.unpack("<B"))),
    b"\x8b": lambda m: m.stack.append(m.long(m.unpack("<I"))),
    b"F": lambda m: m.stack.append(float(m.line())), b"G": lambda m: m.stack.append(m.unpack(">d")),
    # text and bytes
    b"S": _string, b"V": _unicode_text,
    b"T": _len_bytes("<I", lambda raw, m: raw.decode("latin-1")),
    b"U": _len_bytes("<B", lambda raw, m: raw.decode("latin-1")),
    b"X": _len_bytes("<I", lambda raw, m: m.text(raw)), b"\x8c": _len_bytes("<B", lambda raw, m: m.text(raw)),
    b"\x8d": _len_bytes("<Q", lambda raw, m: m.text(raw)),
    b"B": _len_bytes("<I", None), b"C": _len_bytes("<B", None), b"\x8e": _len_bytes("<Q", None),
    b"\x96": _bytearray8,
    # containers
    b")": lambda m: m.stack.append(()), b"t": lambda m: m.stack.append(tuple(m.pop_mark())),
    b"\x85": _tuple_n(1), b"\x86": _tuple_n(2), b"\x87": _tuple_n(3),
    b"]": lambda m: m.stack.append([]), b"l": lambda m: m.stack.append(m.pop_mark()),
    b"a": _append, b"e": _appends,
    b"}": lambda m: m.stack.append({}), b"d": _dict_from_mark,
    b"s": lambda m: _setitems(m, [m.pop(), m.pop()][::-1]), b"u": lambda m: _setitems(m, m.pop_mark()),
    b"\x8f": lambda m: m.stack.append(set()), b"\x90": _additems, b"\x91": _frozenset,
    # memo
    b"p": lambda m: _memo_put(m, m.int_from_text(m.line())), b"q": lambda m: _memo_put(m, m.unpack("<B")),
    b"r": lambda m: _memo_put(m, m.unpack("<I")), b"\x94": lambda m: _memo_put(m, len(m.memo)),
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


def _finish(obj, what: str):
    """The result with every pending object replaced by what BUILD made, checked
    to be acyclic, at most ``_MAX_DEPTH`` deep, and free of internals."""
    done: dict[int, Any] = {}
    active: set[int] = set()

    def walk(x, depth):
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
        if isinstance(x, _Pending):
            if not x.built:
                raise UnsafePickleError(f"{what}: an array was never given its data ({x.recipe.name} "
                                        "without BUILD); refusing uninitialised memory.")
            out = x.value
        elif isinstance(x, (bytearray, MXNDArray, RowSparse)):
            out = x
        elif isinstance(x, tuple):
            out = tuple(walk(c, depth + 1) for c in x)
        elif isinstance(x, list):
            out = [walk(c, depth + 1) for c in x]
        elif isinstance(x, dict):
            out = {walk(k, depth + 1): walk(v, depth + 1) for k, v in x.items()}
        elif isinstance(x, (set, frozenset)):
            out = type(x)(walk(c, depth + 1) for c in x)
        elif isinstance(x, PickledObject):
            x.attrs = {k: walk(v, depth + 1) for k, v in x.attrs.items()}
            x.args = walk(x.args, depth + 1)
            out = x
        else:  # a recipe or a mark left as a value
            raise UnsafePickleError(f"{what}: the pickle returns {getattr(x, 'name', type(x).__name__)} "
                                    "itself; not a state file.")
        active.discard(key)
        done[key] = out
        return out

    return walk(obj, 0)


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
    try:
        return _Machine(bytes(data), what, table).run()
    except MigrateError:
        raise
    except (struct.error, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            MemoryError, RecursionError, UnicodeError) as err:
        raise MigrateError(f"{what}: cannot read the pickle ({type(err).__name__}: {err}); the file is "
                           "truncated or not an optimizer-state file.") from None


def read_bytes(fname) -> tuple[bytes, str]:
    """The bytes of ``fname`` (a path or an open binary file) and a label for messages."""
    if hasattr(fname, "read"):
        data = fname.read()
        if not isinstance(data, (bytes, bytearray)):
            raise MigrateError(f"{getattr(fname, 'name', '<file>')}: open the file in binary mode ('rb').")
        return bytes(data), getattr(fname, "name", "<file>")
    label = os.fspath(fname)
    with open(label, "rb") as f:
        return f.read(), label
