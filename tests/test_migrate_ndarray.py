"""MXNet's raw NDArray layout (gradxform.migrate._ndarray) against MXNet 1.9.1 itself, and its refusals.

``tests/fixtures/mxnet/ndarray_raw.npz`` (``tools/mxnet_ndarray_fixtures.py``) holds the bytes
MXNet 1.9.1 writes (``MXNDArraySaveRawBytes``, the ``handle`` of a pickled NDArray) or reads
(V1 magic, an array without storage, type flags 8-12, written by hand) and what MXNet loads
from them. The layout, quoted in `decode_ndarray`'s docstring, is ``NDArray::Save``
(src/ndarray/ndarray.cc); the type flags are mshadow's ``TypeFlag``
(mxnet/include/mshadow/base.h lines 358-372 in the MXNet venv's site-packages).
The hostile inputs are written here by hand: each must give the documented `MigrateError`, never
another exception, and never an array the bytes do not hold.
"""
import os
import struct

import numpy as np
import pytest

from gradxform.migrate import MigrateError
from gradxform.migrate._ndarray import MAX_RANK, Budget, RowSparse, checked_shape, decode_ndarray

Z = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mxnet", "ndarray_raw.npz"))
CASES = sorted(k[4:] for k in Z.files if k.startswith("raw_"))
V2, V3 = 0xF993FAC9, 0xF993FACA
CPU_F32 = struct.pack("<iii", 1, 0, 0)  # dev_type cpu, dev_id 0, type flag 0 (float32)


def raw(case: str) -> bytes:
    return Z[f"raw_{case}"].tobytes()


def dense(shape, flag=0, data=None, magic=V2) -> bytes:
    """A dense NDArray's bytes: magic, stype 0, shape, context, type flag, data."""
    head = struct.pack("<Iii", magic, 0, len(shape)) + struct.pack(f"<{len(shape)}q", *shape)
    return head + struct.pack("<iii", 1, 0, flag) + (b"" if data is None else data)


def row_sparse(shape, rows, values, aux_flag=6, rows_shape=None, magic=V2) -> bytes:
    """A row_sparse NDArray's bytes (``NDArray::Save``): magic, stype 1, storage shape, shape,
    context, type flag, aux type flag, aux shape, values, row indices."""
    def tshape(s):
        return struct.pack("<i", len(s)) + struct.pack(f"<{len(s)}q", *s)
    values, rows = np.asarray(values, "<f4"), np.asarray(rows)
    rows_shape = rows.shape if rows_shape is None else rows_shape
    return (struct.pack("<Ii", magic, 1) + tshape(values.shape) + tshape(shape) + CPU_F32
            + struct.pack("<i", aux_flag) + tshape(rows_shape) + values.tobytes() + rows.tobytes())


@pytest.mark.parametrize("case", CASES)
def test_decodes_what_mxnet_loads(case):
    got = None
    if f"want_{case}" in Z.files and case not in ("csr", "flag12"):
        want = Z[f"want_{case}"]
        got = decode_ndarray(raw(case))
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    elif f"none_{case}" in Z.files:  # MXNet loads an array without storage (is_none)
        assert decode_ndarray(raw(case)) is None
    else:
        # refused: MXNet's own loader refuses flags 8-11 ("Unknown type enum 8", recorded in err_);
        # bfloat16 (flag 12) has no numpy dtype; CSR is never an optimizer state (MXNet's
        # optimizers keep dense or row_sparse states): both are gradxform's documented refusals
        match = {"csr": "CSR NDArrays are not supported"}.get(case, f"type flag {case[4:]} is not supported")
        if case.startswith("flag") and case != "flag12":
            assert "Unknown type enum" in str(Z[f"err_{case}"])
        with pytest.raises(MigrateError, match=match):
            decode_ndarray(raw(case))


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("rsp")])
def test_row_sparse_kept_sparse_is_mxnets_array(case):
    rs = decode_ndarray(raw(case), sparse=True)
    want = Z[f"want_{case}"]
    assert isinstance(rs, RowSparse) and rs.shape == want.shape and rs.dtype == want.dtype
    np.testing.assert_array_equal(rs.dense(), want)
    assert sorted(rs.rows.tolist()) == [i for i in range(want.shape[0]) if want[i].any()]


def test_rank_bound():
    """``MAX_RANK`` (32) is the reader's documented bound: rank 32 is read, 33 refused before its
    dimensions are read, in the NDArray and in `checked_shape` alike."""
    one = np.float32(1.5).tobytes()
    a = decode_ndarray(dense((1,) * MAX_RANK, data=one))
    assert a.shape == (1,) * 32 and a.item() == 1.5
    with pytest.raises(MigrateError, match="implausible NDArray rank 33"):
        decode_ndarray(dense((1,) * (MAX_RANK + 1), data=one))
    assert checked_shape((1,) * 32, "x") == (1,) * 32
    with pytest.raises(MigrateError, match="not an array shape"):
        checked_shape((1,) * 33, "x")


@pytest.mark.parametrize("shape", [
    (), (0,), (0, 3), (2, 3), ((1 << 62) - 1,)])
def test_checked_shape_accepts(shape):
    assert checked_shape(shape, "x") == shape


@pytest.mark.parametrize("shape", [
    [2, 3], (2, -1), (-1,), (True,), (1 << 62,), (2, 1 << 62), (2.0,), ("3",), (np.int64(3),), None])
def test_checked_shape_refuses(shape):
    with pytest.raises(MigrateError, match=r"^x: .* is not an array shape\.$"):
        checked_shape(shape, "x")


def test_budget_is_exact():
    """A budget of exactly the array's bytes reads it; one byte less is refused."""
    data = np.arange(6, dtype="<f4").tobytes()
    np.testing.assert_array_equal(decode_ndarray(dense((2, 3), data=data), budget=Budget(24)),
                                  np.arange(6).reshape(2, 3))
    b = Budget(24)
    b.take(24, "x")
    assert b.left == 0 and b.total == 24
    with pytest.raises(MigrateError, match="more than the 23 bytes"):
        decode_ndarray(dense((2, 3), data=data), budget=Budget(23))


@pytest.mark.parametrize("case", ["float32", "rsp", "v1", "v3_scalar"])
def test_every_truncation_is_refused(case):
    """Each proper prefix of a real array: `MigrateError` (truncated), never a struct or numpy error."""
    b = raw(case)
    for cut in range(len(b)):
        with pytest.raises(MigrateError, match="truncated"):
            decode_ndarray(b[:cut])
    assert decode_ndarray(b + b"\0") is not None  # trailing bytes belong to the next array


@pytest.mark.parametrize("data, match", [
    (struct.pack("<Iii", V3, 0, -2), "implausible NDArray rank -2"),
    (struct.pack("<Iii", V2, 0, -1), "implausible NDArray rank -1"),
    (dense((2, -1), magic=V3), "unknown dimensions"),
    (dense((-1, 2), magic=V3), "unknown dimensions"),
    (struct.pack("<Ii", V2, 3), "unknown NDArray storage type 3"),
    (struct.pack("<Ii", V2, -1), "unknown NDArray storage type -1"),
    (struct.pack("<I", 0xF993FACB), "magic"),
    (row_sparse((5, 2), [[1], [3]], [[1, 2], [3, 4]]), "do not fit"),            # 2-d row indices
    (row_sparse((5, 2), [1, 3], [[1, 2], [3, 4], [5, 6]], rows_shape=(2,)), "do not fit"),  # 3 rows of values
    (row_sparse((5, 2), [1, 3], [[1, 2, 0], [3, 4, 0]]), "do not fit"),          # a row of 3, not 2
    (row_sparse((5, 2), np.array([1, 3], "<f4"), [[1, 2], [3, 4]], aux_flag=0), "do not fit"),  # float rows
    (row_sparse((), [0], [1.0], magic=V3), "do not fit"),                        # a row-sparse scalar
    (row_sparse((5, 2), [-1, 1], [[1, 2], [3, 4]]), "out of range"),
    (row_sparse((5, 2), [1, 5], [[1, 2], [3, 4]]), "out of range"),
    (row_sparse((5, 2), [5], [[1, 2]]), "out of range"),
], ids=["v3_rank_-2", "v2_rank_-1", "v3_unknown_dim", "v3_unknown_first_dim", "stype_3", "stype_-1", "magic",
        "rows_2d", "values_rows", "values_width", "float_rows", "rsp_scalar", "row_-1", "row_5_of_5",
        "only_row_5_of_5"])
def test_hostile_arrays_are_refused(data, match):
    with pytest.raises(MigrateError, match=match):
        decode_ndarray(data)
    with pytest.raises(MigrateError, match=match):
        decode_ndarray(data, sparse=True)
