"""What an allowed global in a framework pickle may build (the recipes of `gradxform.migrate._pickle`).

Each allowed ``(module, name)`` maps to a `_Recipe`: its ``reduce``/``newobj``
and, for objects completed by BUILD, its ``build`` are the only code a pickle
reaches, and none of them calls anything the file names.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ._errors import MigrateError, UnsafePickleError, short
from ._ndarray import Budget, checked_shape, decode_ndarray, nbytes_of

__all__ = ["PickledObject", "MXNDArray", "record_class", "MXNET_GLOBALS", "NUMPY_GLOBALS", "BASIC_GLOBALS"]


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


class _Pending:
    """An object between REDUCE and its BUILD: what BUILD may complete."""

    __slots__ = ("recipe", "args", "value", "built")

    def __init__(self, recipe: "_Recipe", args: tuple, value: Any = None, built: bool = False):
        self.recipe, self.args, self.value, self.built = recipe, args, value, built


class ReadContext(Protocol):
    """What a recipe reads from the unpickler running it (`gradxform.migrate._pickle`):
    the file's memory budget and its label for messages."""
    budget: Budget
    what: str


class _Recipe:
    """An allowed global. ``reduce(args)`` and ``build(obj, state)`` are the only
    code a pickle can reach through it; neither calls anything from the file."""

    name = "?"

    def reduce(self, args: tuple, ctx: ReadContext) -> Any:  # what the pickle's REDUCE builds
        raise UnsafePickleError(f"{self.name} cannot be called in a state file.")

    def newobj(self, args: tuple, ctx: ReadContext) -> Any:
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
            raise UnsafePickleError(f"numpy.dtype{short(args)}: only a type code is allowed.")
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
            raise UnsafePickleError(f"numpy dtype state {short(state)} is not a plain type's.")
        order, subdescr, names, fields, elsize, align, flags = state[1:8]
        if (order not in ("<", ">", "|", "=") or subdescr is not None or names is not None
                or fields is not None or elsize != -1 or align != -1 or flags != 0
                or (len(state) == 9 and state[8] is not None)):
            raise UnsafePickleError(f"numpy dtype state {short(state)} is not a plain numeric type's "
                                    "(fields, flags or metadata are never optimizer state).")
        if order in "<>":
            pending.value = pending.value.newbyteorder(order)


def _dtype_of(x, what: str) -> np.dtype:
    if isinstance(x, _Pending) and isinstance(x.recipe, _Dtype):
        return x.value
    raise UnsafePickleError(f"{what}: the dtype is a {type(x).__name__}, not a numpy.dtype record.")


def _raw_bytes(raw, what: str) -> bytes | bytearray:
    if isinstance(raw, str):  # Python 2 pickles carry latin-1 text
        raw = raw.encode("latin-1")
    if not isinstance(raw, (bytes, bytearray)):
        raise UnsafePickleError(f"{what}: the array data are a {type(raw).__name__}, not bytes.")
    return raw


def _array_from(raw, dtype: np.dtype, shape, fortran: bool, ctx: ReadContext, what: str) -> np.ndarray:
    shape = checked_shape(tuple(shape) if isinstance(shape, list) else shape, what)
    raw = _raw_bytes(raw, what)
    if len(raw) != nbytes_of(shape, dtype):
        raise MigrateError(f"{what}: {len(raw)} data bytes for shape {shape} of {dtype} (needs "
                           f"{nbytes_of(shape, dtype)}).")
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
        raise UnsafePickleError(f"codec {short(enc)} is not allowed.")
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
    # MXNet's contrib optimizers live in their own module (GroupAdaGrad: mxnet.optimizer.contrib)
    ("mxnet.optimizer.contrib", "GroupAdaGrad"): _Record(record_class("mxnet.optimizer.contrib.GroupAdaGrad")),
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

BASIC_GLOBALS: dict[tuple[str, str], _Recipe] = {
    **{(mod, "bytearray"): _Bytearray() for mod in ("builtins", "__builtin__")},
    **{(mod, "object"): _OBJECT for mod in ("builtins", "__builtin__")},
    **{(mod, "bytes"): _EmptyBytes() for mod in ("builtins", "__builtin__")},
    **{(mod, "_reconstructor"): _CopyregReconstructor() for mod in ("copyreg", "copy_reg")},
    ("_codecs", "encode"): _Encode(),
}
