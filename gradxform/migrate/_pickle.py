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

__all__ = ["MigrateError", "UnsafePickleError", "PickledObject", "RowSparse", "safe_loads", "decode_ndarray",
           "MXNET_GLOBALS", "NUMPY_GLOBALS"]

_BUDGET_FACTOR = 4          # copies beyond the file: at most 4 x its length + 1 MiB
_BUDGET_SLACK = 1 << 20
_MAX_DEPTH = 100            # nesting of containers in the result
_MAX_RANK = 32              # numpy's own limit is 64; MXNet's TShape is far below either
_MAX_INT_BYTES = 64         # LONG1/LONG4/text ints: state files hold counts, not bignums


class MigrateError(ValueError):
    """A state file that cannot be turned into a gradxform state: corrupt,
    truncated, hostile, or not matching the parameters or the optimizer."""


class UnsafePickleError(MigrateError):
    """The pickle names a global outside the allow-list, or asks for a
    construct a state file never needs; nothing was called."""


class PickledObject:
    """A framework object read as its attribute dict (``attrs``), never
    constructed: ``cls_path`` is the class path the pickle named."""

    cls_path = "?"

    def __init__(self, args: tuple = ()):
        self.attrs: dict = {}
        self.args = args

    def _build(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            if not all(s is None or isinstance(s, dict) for s in state):
                raise UnsafePickleError(f"{self.cls_path}: a (dict, slots) state of other types.")
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise UnsafePickleError(f"{self.cls_path}: expected an attribute dict with string keys in the "
                                    f"pickle; got {type(state).__name__}.")
        self.attrs.update(state)

    def __getattr__(self, name):
        attrs = self.__dict__.get("attrs", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(f"{self.cls_path} in the state file has no attribute {name!r}.")

    @property
    def class_name(self) -> str:
        return self.cls_path.rsplit(".", 1)[-1]

    def __repr__(self):
        return f"<pickled {self.cls_path}>"


_RECORD_CACHE: dict[str, type] = {}


def record_class(path: str) -> type:
    """A `PickledObject` subclass for ``path`` (one per path, so isinstance works)."""
    if path not in _RECORD_CACHE:
        _RECORD_CACHE[path] = type(path.rsplit(".", 1)[-1], (PickledObject,), {"cls_path": path})
    return _RECORD_CACHE[path]


class _Budget:
    """Bytes the reader may still allocate beyond the file's own."""

    def __init__(self, nbytes: int):
        self.left = nbytes

    def take(self, nbytes: int, what: str):
        if nbytes > self.left:
            raise MigrateError(f"{what}: needs {nbytes} bytes, more than this file's size allows (a state "
                               "file's arrays are stored in it); the file is corrupt or hostile.")
        self.left -= nbytes


_UNLIMITED = _Budget(1 << 62)


# ---------------------------------------------------------------------------
# MXNet NDArray raw bytes (``MXNDArraySaveRawBytes`` / ``NDArray::Save``)
# ---------------------------------------------------------------------------
_V1, _V2, _V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
_MX_DTYPES = {0: "<f4", 1: "<f8", 2: "<f2", 3: "u1", 4: "<i4", 5: "i1", 6: "<i8", 7: "?",
              8: "<i2", 9: "<u2", 10: "<u4", 11: "<u8"}  # 12 = bfloat16: numpy has none


class RowSparse:
    """A row-sparse NDArray kept sparse: ``dense()`` makes the array. Its
    ``shape`` is checked against the parameter before that, so a file cannot
    make the reader allocate a dense array larger than the model's."""

    def __init__(self, shape: tuple, rows: np.ndarray, values: np.ndarray):
        self.shape, self.rows, self.values, self.dtype = shape, rows, values, values.dtype

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, self.dtype)
        out[self.rows] = self.values
        return out

    def __repr__(self):
        return f"RowSparse(shape={self.shape}, rows={len(self.rows)})"


def _checked_shape(shape, what: str) -> tuple:
    if not isinstance(shape, tuple) or len(shape) > _MAX_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 62 for d in shape):
        raise MigrateError(f"{what}: {shape!r} is not an array shape.")
    return shape


def _nbytes(shape: tuple, dtype: np.dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d  # Python ints: no overflow to hide a huge shape
    return n


class _Reader:
    def __init__(self, buf: bytes, what: str, budget: _Budget):
        self.buf, self.off, self.what, self.budget = buf, 0, what, budget

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.off + size > len(self.buf):
            raise MigrateError(f"{self.what}: the NDArray bytes are truncated ({len(self.buf)} bytes; "
                               f"needed {self.off + size}).")
        out = struct.unpack_from(fmt, self.buf, self.off)
        self.off += size
        return out

    def shape(self, v3: bool):
        (ndim,) = self.take("<i")
        if ndim > _MAX_RANK or ndim < (-1 if v3 else 0):
            raise MigrateError(f"{self.what}: implausible NDArray rank {ndim}; the file is corrupt.")
        return ndim, (self.take(f"<{ndim}q") if ndim > 0 else ())

    def array(self, flag: int, shape, what: str):
        if flag not in _MX_DTYPES:
            raise MigrateError(f"{self.what}: NDArray type flag {flag} is not supported "
                               "(12 = bfloat16 has no numpy dtype).")
        if any(d < 0 for d in shape):
            raise MigrateError(f"{self.what}: NDArray {what} shape {shape} has unknown dimensions.")
        dt = np.dtype(_MX_DTYPES[flag])
        end = self.off + _nbytes(shape, dt)
        if end > len(self.buf):
            raise MigrateError(f"{self.what}: the NDArray data are truncated ({len(self.buf)} bytes; "
                               f"needed {end}).")
        self.budget.take(end - self.off, self.what)
        n = (end - self.off) // dt.itemsize
        out = np.frombuffer(self.buf, dt, n, self.off).reshape(shape).astype(dt.newbyteorder("="))
        self.off = end
        return out


def decode_ndarray(raw: bytes, what: str = "NDArray", *, sparse: bool = False,
                   budget: _Budget = _UNLIMITED) -> np.ndarray | RowSparse | None:
    """Decodes MXNet's NDArray serialisation (little-endian)::

        uint32 magic (V2 0xF993FAC9; V3 0xF993FACA with numpy shape semantics; V1 0xF993FAC8)
        int32 stype (V2/V3: 0 dense, 1 row_sparse, 2 csr); [sparse] TShape storage_shape
        TShape shape = int32 ndim, ndim x int64   (V1/V2: ndim 0 = no array; V3: -1 = none, 0 = scalar)
        int32 dev_type, int32 dev_id, int32 type_flag; [sparse] per aux: int32 flag, TShape
        data, C order; [sparse] aux data

    Row-sparse arrays are returned dense, or as `RowSparse` with ``sparse=True``;
    ``None`` for an array without storage.
    """
    r = _Reader(bytes(raw), what, budget)
    (magic,) = r.take("<I")
    if magic not in (_V1, _V2, _V3):
        raise MigrateError(f"{what}: not an MXNet NDArray (magic 0x{magic:08X}); pre-V1 legacy "
                           "arrays are not supported.")
    v3 = magic == _V3
    stype = 0 if magic == _V1 else r.take("<i")[0]
    if stype not in (0, 1, 2):
        raise MigrateError(f"{what}: unknown NDArray storage type {stype}.")
    storage_shape = r.shape(v3)[1] if stype else None
    ndim, shape = r.shape(v3)
    if (v3 and ndim < 0) or (not v3 and ndim == 0):
        return None
    r.take("<ii")  # context: dev_type, dev_id (the array is loaded on the host)
    (flag,) = r.take("<i")
    if stype == 0:
        return r.array(flag, shape, "data")
    if stype == 2:
        raise MigrateError(f"{what}: CSR NDArrays are not supported in optimizer states.")
    (aux_flag,) = r.take("<i")
    _, aux_shape = r.shape(v3)
    values = r.array(flag, storage_shape, "values")
    rows = r.array(aux_flag, aux_shape, "row indices")
    if not shape or rows.ndim != 1 or values.shape != (len(rows),) + tuple(shape[1:]) \
            or not np.issubdtype(rows.dtype, np.integer):
        raise MigrateError(f"{what}: row_sparse values {values.shape} and indices {rows.shape} do not fit "
                           f"shape {shape}.")
    if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
        raise MigrateError(f"{what}: row_sparse indices out of range for shape {shape}.")
    out = RowSparse(tuple(shape), rows.astype(np.int64), values)
    return out if sparse else out.dense()


# ---------------------------------------------------------------------------
# Recipes: what an allowed global may build
# ---------------------------------------------------------------------------
class _Pending:
    """An object between REDUCE and its BUILD: what BUILD may complete."""

    def __init__(self, recipe: "_Recipe", args: tuple, value=None, built: bool = False):
        self.recipe, self.args, self.value, self.built = recipe, args, value, built


class _Recipe:
    """An allowed global. ``reduce(args)`` and ``build(obj, state)`` are the only
    code a pickle can reach through it; neither calls anything from the file."""

    name = "?"

    def reduce(self, args: tuple, ctx: "_Machine"):
        raise UnsafePickleError(f"{self.name} cannot be called in a state file.")

    def newobj(self, args: tuple, ctx: "_Machine"):
        raise UnsafePickleError(f"{self.name}.__new__ is not allowed in a state file.")


class _Sentinel(_Recipe):
    """A global that is only ever an argument (``numpy.ndarray`` as the subtype
    of ``_reconstruct``, ``object`` as the base of ``copyreg._reconstructor``)."""

    def __init__(self, name: str):
        self.name = name


_NDARRAY = _Sentinel("numpy.ndarray")
_OBJECT = _Sentinel("builtins.object")


class _Record(_Recipe):
    """A framework class read as a `PickledObject`: any arguments kept, the
    BUILD state taken as its attribute dict."""

    def __init__(self, cls: type):
        self.cls, self.name = cls, cls.cls_path

    def reduce(self, args, ctx):
        return self.cls(args)

    newobj = reduce


_DTYPE_KINDS = "biufc"


class _Dtype(_Recipe):
    name = "numpy.dtype"

    def reduce(self, args, ctx):
        if not (1 <= len(args) <= 3 and isinstance(args[0], str) and len(args[0]) <= 8):
            raise UnsafePickleError(f"numpy.dtype{args!r:.80}: only a type code is allowed.")
        try:
            dt = np.dtype(args[0])
        except TypeError:
            raise MigrateError(f"numpy.dtype({args[0]!r}): not a dtype.") from None
        if dt.kind not in _DTYPE_KINDS or dt.fields is not None or dt.subdtype is not None:
            raise UnsafePickleError(f"numpy dtype {args[0]!r} is not allowed: only bool, integer, float and "
                                    "complex arrays are optimizer state (object dtypes hold pointers).")
        return _Pending(self, args, value=dt, built=True)  # usable without BUILD (native byte order)

    @staticmethod
    def build(pending: _Pending, state):
        # numpy's dtype.__reduce__ state: (version, byteorder, subdescr, names, fields, elsize, alignment,
        # flags[, metadata]); a plain numeric type has None/None/None, -1, -1 and flags 0.
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)):
            raise UnsafePickleError(f"numpy dtype state {state!r:.80} is not a plain type's.")
        order, subdescr, names, fields, elsize, align, flags = state[1:8]
        if (order not in ("<", ">", "|", "=") or subdescr is not None or names is not None
                or fields is not None or elsize != -1 or align != -1 or flags != 0
                or (len(state) == 9 and state[8] is not None)):
            raise UnsafePickleError(f"numpy dtype state {state!r:.80} is not a plain numeric type's "
                                    "(fields, flags or metadata are never optimizer state).")
        if order in "<>":
            pending.value = pending.value.newbyteorder(order)


def _dtype_of(x, what: str) -> np.dtype:
    if isinstance(x, _Pending) and isinstance(x.recipe, _Dtype):
        return x.value
    raise UnsafePickleError(f"{what}: the dtype is a {type(x).__name__}, not a numpy.dtype record.")


def _raw_bytes(raw, what: str) -> bytes:
    if isinstance(raw, str):  # Python 2 pickles carry latin-1 text
        raw = raw.encode("latin-1")
    if not isinstance(raw, (bytes, bytearray)):
        raise UnsafePickleError(f"{what}: the array data are a {type(raw).__name__}, not bytes.")
    return raw


def _array_from(raw, dtype: np.dtype, shape, fortran: bool, ctx: "_Machine", what: str) -> np.ndarray:
    shape = _checked_shape(tuple(shape) if isinstance(shape, list) else shape, what)
    raw = _raw_bytes(raw, what)
    if len(raw) != _nbytes(shape, dtype):
        raise MigrateError(f"{what}: {len(raw)} data bytes for shape {shape} of {dtype} (needs "
                           f"{_nbytes(shape, dtype)}).")
    ctx.budget.take(len(raw), what)
    flat = np.frombuffer(raw, dtype)
    return flat.reshape(shape, order="F" if fortran else "C").astype(dtype.newbyteorder("="), order="K")


class _Reconstruct(_Recipe):
    """``numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')`` + BUILD
    ``(version, shape, dtype, is_fortran, rawdata)``: numpy's array pickle."""

    name = "numpy.core.multiarray._reconstruct"

    def reduce(self, args, ctx):
        if len(args) != 3 or args[0] is not _NDARRAY:
            raise UnsafePickleError(f"{self.name}: only plain numpy.ndarray is allowed.")
        return _Pending(self, ())

    @staticmethod
    def build(pending: _Pending, state, ctx):
        if isinstance(state, tuple) and len(state) == 5 and state[0] == 1:
            state = state[1:]
        if not (isinstance(state, tuple) and len(state) == 4 and state[2] in (0, 1)):
            raise UnsafePickleError(f"numpy array state {type(state).__name__} is not "
                                    "(shape, dtype, is_fortran, rawdata).")
        shape, dtype, fortran, raw = state
        pending.value = _array_from(raw, _dtype_of(dtype, "numpy array"), shape, fortran, ctx, "numpy array")
        pending.built = True


class _Scalar(_Recipe):
    name = "numpy.core.multiarray.scalar"

    def reduce(self, args, ctx):
        if len(args) != 2:
            raise UnsafePickleError(f"{self.name}: expected (dtype, bytes).")
        dt = _dtype_of(args[0], self.name)
        return _array_from(args[1], dt, (), False, ctx, self.name)[()]


class _FromBuffer(_Recipe):
    """numpy's protocol-5 array rebuild (``numpy.core.numeric._frombuffer``)."""

    name = "numpy.core.numeric._frombuffer"

    def reduce(self, args, ctx):
        if len(args) != 4 or args[3] not in ("C", "F"):
            raise UnsafePickleError(f"{self.name}: expected (buffer, dtype, shape, 'C'|'F').")
        return _array_from(args[0], _dtype_of(args[1], self.name), args[2], args[3] == "F", ctx, self.name)


class _Bytearray(_Recipe):
    name = "builtins.bytearray"

    def reduce(self, args, ctx):
        if args == ():
            return bytearray()
        if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], str):
            data = args[0].encode(_safe_codec(args[1]))  # protocol 2: bytearray(text, 'latin-1')
        elif len(args) == 1 and isinstance(args[0], (bytes, bytearray)):
            data = args[0]
        else:  # bytearray(10**9) would allocate what the file asks
            raise UnsafePickleError("builtins.bytearray: only from bytes or text in a state file.")
        ctx.budget.take(len(data), self.name)
        return bytearray(data)


class _EmptyBytes(_Recipe):
    """``bytes()``: how protocols 0-2 write ``b''``."""

    name = "builtins.bytes"

    def reduce(self, args, ctx):
        if args != ():
            raise UnsafePickleError(f"{self.name}: only bytes() is allowed (other bytes come as data).")
        return b""


class _Encode(_Recipe):
    """``_codecs.encode(text, 'latin1')``: how protocol 2 writes Python 3 bytes."""

    name = "_codecs.encode"

    def reduce(self, args, ctx):
        if not (1 <= len(args) <= 2 and isinstance(args[0], str) and all(isinstance(a, str) for a in args)):
            raise UnsafePickleError(f"{self.name}: expected (text, codec).")
        return args[0].encode(_safe_codec(args[1] if len(args) == 2 else "utf-8"))


class _CopyregReconstructor(_Recipe):
    """``copyreg._reconstructor(cls, object, None)`` of protocol 0/1, for records only."""

    name = "copyreg._reconstructor"

    def reduce(self, args, ctx):
        if len(args) != 3 or not isinstance(args[0], _Record) or args[1] is not _OBJECT or args[2] is not None:
            raise UnsafePickleError(f"{self.name}: only framework records on object are allowed.")
        return args[0].cls(())


class _NDArrayRecipe(_Recipe):
    """``mxnet.ndarray.NDArray``: REDUCE/NEWOBJ then BUILD ``{'handle': raw bytes}``."""

    name = "mxnet.ndarray.NDArray"

    def reduce(self, args, ctx):
        return _Pending(self, ())

    newobj = reduce

    @staticmethod
    def build(pending: _Pending, state, ctx):
        if not isinstance(state, dict) or "handle" not in state:
            raise UnsafePickleError("NDArray: expected {'handle': bytes} in the pickle.")
        handle = state["handle"]
        if handle is not None and not isinstance(handle, (bytes, bytearray)):
            raise UnsafePickleError(f"NDArray: the handle is {type(handle).__name__}, not bytes.")
        pending.value = MXNDArray(None if handle is None else decode_ndarray(
            handle, f"{ctx.what}: NDArray", sparse=True, budget=ctx.budget))
        pending.built = True


class MXNDArray:
    """An MXNet NDArray from the pickle: ``value`` is a numpy array, a `RowSparse` or None."""

    def __init__(self, value):
        self.value = value


def _safe_codec(enc) -> str:
    if not isinstance(enc, str) or enc.lower().replace("-", "").replace("_", "") not in (
            "latin1", "utf8", "ascii", "iso88591"):
        raise UnsafePickleError(f"codec {enc!r} is not allowed.")
    return enc


_MX_OPTIMIZERS = ("SGD", "ccSGD", "NAG", "Signum", "FTML", "LBSGD", "DCASGD", "SGLD", "Adam", "AdaGrad",
                  "RMSProp", "AdaDelta", "Ftrl", "Adamax", "Nadam", "LARS", "LAMB", "Test", "Optimizer")
_MX_SCHEDULERS = ("LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler",
                  "CosineScheduler")
_MX_NDARRAY = _NDArrayRecipe()

MXNET_GLOBALS: dict[tuple[str, str], _Recipe] = {
    ("mxnet.ndarray.ndarray", "NDArray"): _MX_NDARRAY,
    ("mxnet.ndarray", "NDArray"): _MX_NDARRAY,
    ("mxnet.ndarray.sparse", "RowSparseNDArray"): _MX_NDARRAY,
    ("mxnet.numpy", "ndarray"): _MX_NDARRAY,
    ("mxnet.numpy.multiarray", "ndarray"): _MX_NDARRAY,
    **{(mod, name): _Record(record_class(f"mxnet.optimizer.optimizer.{name}"))
       for mod in ("mxnet.optimizer.optimizer", "mxnet.optimizer") for name in _MX_OPTIMIZERS},
    **{("mxnet.lr_scheduler", name): _Record(record_class(f"mxnet.lr_scheduler.{name}"))
       for name in _MX_SCHEDULERS},
}

_NUMPY_CORE = ("numpy.core", "numpy._core")
NUMPY_GLOBALS: dict[tuple[str, str], _Recipe] = {
    **{(f"{core}.multiarray", "_reconstruct"): _Reconstruct() for core in _NUMPY_CORE},
    **{(f"{core}.multiarray", "scalar"): _Scalar() for core in _NUMPY_CORE},
    **{(f"{core}.numeric", "_frombuffer"): _FromBuffer() for core in _NUMPY_CORE},
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Dtype(),
}

_BASIC_GLOBALS: dict[tuple[str, str], _Recipe] = {
    **{(mod, "bytearray"): _Bytearray() for mod in ("builtins", "__builtin__")},
    **{(mod, "object"): _OBJECT for mod in ("builtins", "__builtin__")},
    **{(mod, "bytes"): _EmptyBytes() for mod in ("builtins", "__builtin__")},
    **{(mod, "_reconstructor"): _CopyregReconstructor() for mod in ("copyreg", "copy_reg")},
    ("_codecs", "encode"): _Encode(),
}


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------
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
        self.budget = _Budget(_BUDGET_FACTOR * len(data) + _BUDGET_SLACK)

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
    table = dict(_BASIC_GLOBALS)
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
