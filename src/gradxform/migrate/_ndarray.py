"""MXNet's raw NDArray layout (``MXNDArraySaveRawBytes``), decoded without MXNet, and the
allocation budget every migration reader shares (`Budget`)."""
from __future__ import annotations

import struct

import numpy as np

from ._errors import MigrateError, short

__all__ = ["Budget", "RowSparse", "decode_ndarray", "checked_shape", "nbytes_of"]

MAX_RANK = 32  # numpy's own limit is 64; MXNet's TShape is far below either


class Budget:
    """Bytes the reader may still allocate beyond the file's own."""

    def __init__(self, nbytes: int):
        self.left = self.total = nbytes

    def take(self, nbytes: int, what: str):
        if nbytes > self.left:
            raise MigrateError(f"{what}: reading it needs more than the {self.total} bytes its size allows "
                               "(4x its length + 1 MiB: a state file's arrays are stored in it, and its "
                               "structure is small); the file is corrupt or hostile.")
        self.left -= nbytes


_UNLIMITED = Budget(1 << 62)


# ---------------------------------------------------------------------------
# MXNet NDArray raw bytes (``MXNDArraySaveRawBytes`` / ``NDArray::Save``)
# ---------------------------------------------------------------------------
_V1, _V2, _V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
# mshadow's TypeFlag (include/mshadow/base.h) that MXNet 1.9.1 loads: 8-11 (int16, uint16, uint32,
# uint64) are in the enum, but its loader refuses them ("Unknown type enum 8",
# tests/fixtures/mxnet/ndarray_raw.npz), and 12 = bfloat16 has no numpy dtype.
_MX_DTYPES = {0: "<f4", 1: "<f8", 2: "<f2", 3: "u1", 4: "<i4", 5: "i1", 6: "<i8", 7: "?"}


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


def checked_shape(shape, what: str) -> tuple:
    if not isinstance(shape, tuple) or len(shape) > MAX_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 62 for d in shape):
        raise MigrateError(f"{what}: {short(shape)} is not an array shape.")
    return shape


def nbytes_of(shape: tuple, dtype: np.dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d  # Python ints: no overflow to hide a huge shape
    return n


class _Reader:
    def __init__(self, buf: bytes, what: str, budget: Budget):
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
        if ndim > MAX_RANK or ndim < (-1 if v3 else 0):
            raise MigrateError(f"{self.what}: implausible NDArray rank {ndim}; the file is corrupt.")
        return ndim, (self.take(f"<{ndim}q") if ndim > 0 else ())

    def array(self, flag: int, shape, what: str):
        if flag not in _MX_DTYPES:
            raise MigrateError(f"{self.what}: NDArray type flag {flag} is not supported (MXNet 1.9.1 "
                               "loads 0-7 and 12 = bfloat16, which has no numpy dtype).")
        if any(d < 0 for d in shape):
            raise MigrateError(f"{self.what}: NDArray {what} shape {shape} has unknown dimensions.")
        dt = np.dtype(_MX_DTYPES[flag])
        end = self.off + nbytes_of(shape, dt)
        if end > len(self.buf):
            raise MigrateError(f"{self.what}: the NDArray data are truncated ({len(self.buf)} bytes; "
                               f"needed {end}).")
        self.budget.take(end - self.off, self.what)
        n = (end - self.off) // dt.itemsize
        out = np.frombuffer(self.buf, dt, n, self.off).reshape(shape).astype(dt.newbyteorder("="))
        self.off = end
        return out


def decode_ndarray(raw: bytes | bytearray, what: str = "NDArray", *, sparse: bool = False,
                   budget: Budget = _UNLIMITED) -> np.ndarray | RowSparse | None:
    """Decodes MXNet's NDArray serialisation (little-endian)::

        uint32 magic (V2 0xF993FAC9; V3 0xF993FACA with numpy shape semantics; V1 0xF993FAC8)
        int32 stype (V2/V3: 0 dense, 1 row_sparse, 2 csr); [sparse] TShape storage_shape
        TShape shape = int32 ndim, ndim x int64   (V1/V2: ndim 0 = no array; V3: -1 = none, 0 = scalar)
        int32 dev_type, int32 dev_id, int32 type_flag; [sparse] per aux: int32 flag, TShape
        data, C order; [sparse] aux data

    Row-sparse arrays are returned dense, or as `RowSparse` with ``sparse=True``;
    ``None`` for an array without storage.
    """
    return decode_from(_Reader(bytes(raw), what, budget), what, sparse=sparse)


def decode_from(r: _Reader, what: str, *, sparse: bool = False) -> np.ndarray | RowSparse | None:
    """`decode_ndarray` from reader ``r``'s position, leaving it after the array
    (an NDArray list file holds them end to end)."""
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
