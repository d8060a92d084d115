#!/usr/bin/env python
"""MXNet 1.9.1 NDArray raw bytes (``MXNDArraySaveRawBytes``, the ``handle`` of a pickled NDArray)
and what MXNet itself loads from them (``MXNDArrayLoadFromRawBytes``), for
``tests/test_migrate_ndarray.py``.

NOT imported by the test-suite.  Run with the MXNet venv:

    /work/venvs/mxnet/bin/python tools/mxnet_ndarray_fixtures.py

Writes ``tests/fixtures/mxnet/ndarray_raw.npz``: for each case ``raw_<case>`` (uint8, the bytes)
and ``want_<case>`` (``asnumpy()`` of the array MXNet loads back), ``none_<case>`` (a 0-d bool:
MXNet loads an array without storage, ``is_none()``) or nothing (MXNet refuses the bytes; the
message is in ``err_<case>``).  Cases written by MXNet: every dtype of ``_DTYPE_NP_TO_MX``, a
rank-5 array, row_sparse (two rows of five, the first row, the last row in float16, none), CSR, and under numpy shape semantics
(V3 magic) a scalar and a (0, 3) array.  Cases written by hand (layouts MXNet reads but no longer
writes, or type flags it does not know) are loaded by MXNet to record its answer: V1 magic
(no storage type), V2 ndim 0 (no array), type flags 8-12 (mshadow's int16, uint16, uint32,
uint64, bfloat16: MXNet 1.9.1 refuses 8-11, "Unknown type enum 8", and loads 12).
"""
import os
import struct

import mxnet as mx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mxnet", "ndarray_raw.npz")


def raw(a) -> bytes:
    return bytes(a.__getstate__()["handle"])


def load(b: bytes, np_shape: bool):
    """MXNet's own reading of ``b``, through ``mx.nd.load`` of a one-array ``.params`` file (the
    ``__setstate__`` path cannot load a sparse array in 1.9.1: "copying size mismatch"):
    uint64 0x112, uint64 0, uint64 1, the NDArray, uint64 0 names (``NDArray::Save`` of a list)."""
    path = OUT + ".tmp.params"
    with open(path, "wb") as f:
        f.write(struct.pack("<QQQ", 0x112, 0, 1) + b + struct.pack("<Q", 0))
    try:
        with mx.util.np_shape(np_shape):
            return mx.nd.load(path)[0]
    finally:
        os.remove(path)


def main():
    cases = {}
    x = np.arange(6).reshape(2, 3)
    for dt in ["float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bool"]:
        cases[dt] = raw(mx.nd.array(x % 2 if dt == "bool" else x - 2 * (dt[0] == "i"), dtype=dt))
    cases["rank5"] = raw(mx.nd.array(np.arange(24).reshape(1, 2, 3, 4, 1), dtype="float32"))
    cases["rsp"] = raw(mx.nd.sparse.row_sparse_array(
        (np.array([[1, 2], [3, 4]], np.float32), np.array([1, 3])), shape=(5, 2)))
    cases["rsp_f16_last_row"] = raw(mx.nd.sparse.row_sparse_array(
        (np.array([[1.5, -2]], np.float16), np.array([4])), shape=(5, 2), dtype="float16"))
    cases["rsp_first_row"] = raw(mx.nd.sparse.row_sparse_array(
        (np.array([[7, 8]], np.float32), np.array([0])), shape=(5, 2)))
    cases["rsp_empty"] = raw(mx.nd.sparse.zeros("row_sparse", (4, 3)))
    cases["csr"] = raw(mx.nd.sparse.csr_matrix(np.eye(2, dtype=np.float32)))
    mx.util.set_np_shape(True)
    cases["v3_scalar"] = raw(mx.nd.array(np.float32(2.5)).reshape(()))
    cases["v3_zero_size"] = raw(mx.nd.zeros((0, 3)))
    mx.util.set_np_shape(False)
    ctx_f32 = struct.pack("<iii", 1, 0, 0)
    cases["v1"] = (struct.pack("<Iiqq", 0xF993FAC8, 2, 1, 3) + ctx_f32 + np.arange(3, dtype="<f4").tobytes())
    cases["v2_ndim0"] = struct.pack("<Iii", 0xF993FAC9, 0, 0)
    for flag, dt in [(8, "<i2"), (9, "<u2"), (10, "<u4"), (11, "<u8"), (12, "<u2")]:
        cases[f"flag{flag}"] = (struct.pack("<IiiqiiI", 0xF993FAC9, 0, 1, 3, 1, 0, flag)
                                + np.arange(3, dtype=dt).tobytes())
    out = {}
    for name, b in cases.items():
        out[f"raw_{name}"] = np.frombuffer(b, np.uint8)
        try:
            v3 = b[:4] == struct.pack("<I", 0xF993FACA)
            a = load(b, v3)
            with mx.util.np_shape(v3):
                out[f"want_{name}"] = a.asnumpy()
        except Exception as err:  # noqa: BLE001
            if str(err) == "unknown storage type: -1":  # mx.nd.load's wrapper of a none NDArray
                out[f"none_{name}"] = np.array(True)
                continue
            out[f"err_{name}"] = np.array(str(err).strip().splitlines()[-1])
        finally:
            print(name, {k[:4]: v.shape if k.startswith("want") else v for k, v in out.items()
                         if k.endswith("_" + name) and not k.startswith("raw")})
    out["mxnet_version"] = np.array(mx.__version__)
    np.savez(OUT, **out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
