"""A restricted unpickler for framework optimizer-state files, and MXNet's raw NDArray layout.

``pickle.load`` on an untrusted file runs whatever its ``__reduce__`` names
(``os.system`` is one opcode away). `safe_loads` resolves every global the
stream asks for through an allow-list: MXNet ``NDArray``s become numpy arrays
decoded from their documented binary layout (`decode_ndarray`), MXNet
optimizer and scheduler objects become plain attribute records
(`PickledObject`), numpy arrays and scalars are rebuilt by checked wrappers,
and anything else raises `UnsafePickleError` before a single call is made.
Nothing from the framework is imported, and no framework code runs.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
from typing import Any, Iterable

import numpy as np

__all__ = ["MigrateError", "UnsafePickleError", "PickledObject", "safe_loads", "decode_ndarray",
           "MXNET_GLOBALS", "NUMPY_GLOBALS"]


class MigrateError(ValueError):
    """A state file that cannot be turned into a gradxform state: corrupt,
    truncated, or not matching the parameters or the optimizer."""


class UnsafePickleError(MigrateError, pickle.UnpicklingError):
    """The pickle names a global outside the allow-list; nothing was called."""


class PickledObject:
    """A framework object read as its attribute dict (``attrs``), never
    constructed: ``cls_path`` is the class path the pickle named."""

    cls_path = "?"

    def __init__(self, *args, **kwargs):  # REDUCE with arguments: keep them, call nothing
        self.attrs: dict = {}
        self.args = args

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise UnsafePickleError(f"{self.cls_path}: expected an attribute dict in the pickle; "
                                    f"got {type(state).__name__}.")
        self.attrs = dict(state)

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


# ---------------------------------------------------------------------------
# MXNet NDArray raw bytes (``MXNDArraySaveRawBytes`` / ``NDArray::Save``)
# ---------------------------------------------------------------------------
_V1, _V2, _V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
_MX_DTYPES = {0: "<f4", 1: "<f8", 2: "<f2", 3: "u1", 4: "<i4", 5: "i1", 6: "<i8", 7: "?",
              8: "<i2", 9: "<u2", 10: "<u4", 11: "<u8"}  # 12 = bfloat16: numpy has none


class _Reader:
    def __init__(self, buf: bytes, what: str):
        self.buf, self.off, self.what = buf, 0, what

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.off + size > len(self.buf):
            raise MigrateError(f"{self.what}: the NDArray bytes are truncated ({len(self.buf)} bytes; "
                               f"needed {self.off + size}).")
        out = struct.unpack_from(fmt, self.buf, self.off)
        self.off += size
        return out

    def shape(self):
        (ndim,) = self.take("<i")
        if ndim > 32:
            raise MigrateError(f"{self.what}: implausible NDArray rank {ndim}; the file is corrupt.")
        return ndim, (self.take(f"<{ndim}q") if ndim > 0 else ())

    def array(self, flag: int, shape, what: str):
        if flag not in _MX_DTYPES:
            raise MigrateError(f"{self.what}: NDArray type flag {flag} is not supported "
                               "(12 = bfloat16 has no numpy dtype).")
        if any(d < 0 for d in shape):
            raise MigrateError(f"{self.what}: NDArray {what} shape {shape} has unknown dimensions.")
        dt = np.dtype(_MX_DTYPES[flag])
        n = int(np.prod(shape, dtype=np.int64))
        end = self.off + n * dt.itemsize
        if end > len(self.buf):
            raise MigrateError(f"{self.what}: the NDArray data are truncated ({len(self.buf)} bytes; "
                               f"needed {end}).")
        out = np.frombuffer(self.buf, dt, n, self.off).reshape(shape).astype(dt.newbyteorder("="))
        self.off = end
        return out


def decode_ndarray(raw: bytes, what: str = "NDArray") -> np.ndarray | None:
    """Decodes MXNet's NDArray serialisation (little-endian)::

        uint32 magic (V2 0xF993FAC9; V3 0xF993FACA with numpy shape semantics; V1 0xF993FAC8)
        int32 stype (V2/V3: 0 dense, 1 row_sparse, 2 csr); [sparse] TShape storage_shape
        TShape shape = int32 ndim, ndim x int64   (V1/V2: ndim 0 = no array; V3: -1 = none, 0 = scalar)
        int32 dev_type, int32 dev_id, int32 type_flag; [sparse] per aux: int32 flag, TShape
        data, C order; [sparse] aux data

    Row-sparse arrays are returned dense; ``None`` for an array without storage.
    """
    r = _Reader(bytes(raw), what)
    (magic,) = r.take("<I")
    if magic not in (_V1, _V2, _V3):
        raise MigrateError(f"{what}: not an MXNet NDArray (magic 0x{magic:08X}); pre-V1 legacy "
                           "arrays are not supported.")
    stype = 0 if magic == _V1 else r.take("<i")[0]
    if stype not in (0, 1, 2):
        raise MigrateError(f"{what}: unknown NDArray storage type {stype}.")
    storage_shape = r.shape()[1] if stype else None
    ndim, shape = r.shape()
    if (magic == _V3 and ndim < 0) or (magic != _V3 and ndim == 0):
        return None
    r.take("<ii")  # context: dev_type, dev_id (the array is loaded on the host)
    (flag,) = r.take("<i")
    if stype == 0:
        return r.array(flag, shape, "data")
    if stype == 2:
        raise MigrateError(f"{what}: CSR NDArrays are not supported in optimizer states.")
    (aux_flag,) = r.take("<i")
    _, aux_shape = r.shape()
    values = r.array(flag, storage_shape, "values")
    rows = r.array(aux_flag, aux_shape, "row indices")
    dense = np.zeros(shape, values.dtype)
    if rows.size:
        if rows.min() < 0 or rows.max() >= shape[0]:
            raise MigrateError(f"{what}: row_sparse indices out of range for shape {shape}.")
        dense[rows.astype(np.int64)] = values
    return dense


class MXNDArray:
    """Stands in for ``mxnet.ndarray.NDArray`` during unpickling: ``value`` is
    the decoded numpy array (or None)."""

    def __init__(self, *args):
        self.value = None

    def __setstate__(self, state):
        if not isinstance(state, dict) or "handle" not in state:
            raise UnsafePickleError("NDArray: expected {'handle': bytes} in the pickle.")
        handle = state["handle"]
        if handle is None:
            self.value = None
        elif isinstance(handle, (bytes, bytearray)):
            self.value = decode_ndarray(handle)
        else:
            raise UnsafePickleError(f"NDArray: the handle is {type(handle).__name__}, not bytes.")


# ---------------------------------------------------------------------------
# The allow-list
# ---------------------------------------------------------------------------
def _np_reconstruct(subtype, shape, dtype):
    if subtype is not np.ndarray:
        raise UnsafePickleError(f"numpy _reconstruct of {subtype!r}: only plain ndarrays are allowed.")
    return np.ndarray.__new__(np.ndarray, shape, dtype)


def _np_scalar(dtype, data=None):
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise UnsafePickleError("numpy object scalars are not allowed.")
    if isinstance(data, str):  # pickles written by Python 2 carry latin-1 text
        data = data.encode("latin-1")
    return np.frombuffer(data, dtype, 1)[0]


def _np_frombuffer(buf, dtype, shape, order):
    """numpy's protocol-5 array rebuild (``numpy.core.numeric._frombuffer``)."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise UnsafePickleError("numpy object arrays are not allowed.")
    if order not in ("C", "F"):
        raise UnsafePickleError(f"numpy _frombuffer: order {order!r} is not allowed.")
    return np.frombuffer(bytes(buf), dtype).reshape(shape, order=order).copy()


def _np_dtype(spec, align=False, copy=False):
    dt = np.dtype(spec, align=align, copy=copy)
    if dt.hasobject:
        raise UnsafePickleError("numpy object dtypes are not allowed.")
    return dt


def _reconstructor(cls, base, state):
    """``copyreg._reconstructor`` for protocol 0/1 pickles, limited to our records."""
    if not (isinstance(cls, type) and issubclass(cls, PickledObject)) or base is not object:
        raise UnsafePickleError(f"copyreg._reconstructor of {cls!r}: not an allowed class.")
    return cls()


class _Guarded:
    """An allowed function, shielded from the pickle's BUILD opcode (which would
    otherwise set attributes such as ``__defaults__`` on the function itself)."""

    __slots__ = ("_fn",)

    def __init__(self, fn):
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __setstate__(self, state):
        raise UnsafePickleError("the pickle tries to modify an allowed function; not a state file.")

    def __setattr__(self, name, value):
        raise UnsafePickleError("the pickle tries to modify an allowed function; not a state file.")


_RECORD_CACHE: dict[str, type] = {}


def record_class(path: str) -> type:
    """A `PickledObject` subclass for ``path`` (one per path, so isinstance works)."""
    if path not in _RECORD_CACHE:
        _RECORD_CACHE[path] = type(path.rsplit(".", 1)[-1], (PickledObject,), {"cls_path": path})
    return _RECORD_CACHE[path]


_MX_OPTIMIZERS = ("SGD", "ccSGD", "NAG", "Signum", "FTML", "LBSGD", "DCASGD", "SGLD", "Adam", "AdaGrad",
                  "RMSProp", "AdaDelta", "Ftrl", "Adamax", "Nadam", "LARS", "LAMB", "Test", "Optimizer")
_MX_SCHEDULERS = ("LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler",
                  "CosineScheduler")

MXNET_GLOBALS: dict[tuple[str, str], Any] = {
    ("mxnet.ndarray.ndarray", "NDArray"): MXNDArray,
    ("mxnet.ndarray", "NDArray"): MXNDArray,
    ("mxnet.ndarray.sparse", "RowSparseNDArray"): MXNDArray,
    ("mxnet.numpy", "ndarray"): MXNDArray,
    ("mxnet.numpy.multiarray", "ndarray"): MXNDArray,
    **{(mod, name): record_class(f"mxnet.optimizer.optimizer.{name}")
       for mod in ("mxnet.optimizer.optimizer", "mxnet.optimizer") for name in _MX_OPTIMIZERS},
    **{("mxnet.lr_scheduler", name): record_class(f"mxnet.lr_scheduler.{name}") for name in _MX_SCHEDULERS},
}

NUMPY_GLOBALS: dict[tuple[str, str], Any] = {
    **{(mod, "_reconstruct"): _Guarded(_np_reconstruct)
       for mod in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(mod, "scalar"): _Guarded(_np_scalar) for mod in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(mod, "_frombuffer"): _Guarded(_np_frombuffer) for mod in ("numpy.core.numeric", "numpy._core.numeric")},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _Guarded(_np_dtype),
}

_BASIC_GLOBALS: dict[tuple[str, str], Any] = {
    ("builtins", "bytearray"): bytearray, ("__builtin__", "bytearray"): bytearray,
    ("builtins", "object"): object, ("__builtin__", "object"): object,
    ("copyreg", "_reconstructor"): _Guarded(_reconstructor),
    ("copy_reg", "_reconstructor"): _Guarded(_reconstructor),
    ("_codecs", "encode"): _Guarded(lambda s, enc="utf-8": str(s).encode(_safe_codec(enc))),
}


def _safe_codec(enc: str) -> str:
    if enc.lower().replace("-", "") not in ("latin1", "utf8", "ascii", "iso88591"):
        raise UnsafePickleError(f"_codecs.encode with codec {enc!r} is not allowed.")
    return enc


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, allowed: dict, what: str):
        super().__init__(file, encoding="latin1")
        self._allowed, self._what = allowed, what

    def find_class(self, module, name):
        key = (module, name)
        if key in self._allowed:
            return self._allowed[key]
        raise UnsafePickleError(
            f"{self._what}: refusing to load the global '{module}.{name}' named in the pickle. "
            "These state files only hold framework arrays, optimizer/scheduler records and numpy "
            "arrays; anything else could run code, so nothing was executed. If the file is "
            "genuine, report the class.")

    def persistent_load(self, pid):
        raise UnsafePickleError(f"{self._what}: the pickle uses persistent ids; not a state file.")


def safe_loads(data: bytes, what: str, allowed: Iterable[dict] = (MXNET_GLOBALS, NUMPY_GLOBALS)) -> Any:
    """Unpickles ``data`` resolving globals only through ``allowed`` (dicts of
    ``(module, name) -> callable``) plus bytearray and the protocol-0 helpers.
    Raises `UnsafePickleError` for any other global and `MigrateError` for a
    truncated or corrupt stream."""
    table = dict(_BASIC_GLOBALS)
    for extra in allowed:
        table.update(extra)
    try:
        return _RestrictedUnpickler(io.BytesIO(data), table, what).load()
    except MigrateError:
        raise
    except (EOFError, pickle.UnpicklingError, struct.error, IndexError, KeyError, TypeError,
            ValueError, AttributeError, MemoryError, UnicodeDecodeError) as err:
        raise MigrateError(f"{what}: cannot read the pickle ({type(err).__name__}: {err}); the file is "
                           "truncated or not an optimizer-state file.") from None


def read_bytes(fname) -> tuple[bytes, str]:
    """The bytes of ``fname`` (a path or an open binary file) and a label for messages."""
    if hasattr(fname, "read"):
        return fname.read(), getattr(fname, "name", "<file>")
    label = os.fspath(fname)
    with open(label, "rb") as f:
        return f.read(), label
