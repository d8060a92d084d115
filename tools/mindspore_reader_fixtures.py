#!/usr/bin/env python
"""MindSpore checkpoint files for the protobuf reader's own tests (`read_mindspore_checkpoint`).

Run with the MindSpore venv (never imported by tests):

    /work/venvs/mindspore/bin/python tools/mindspore_reader_fixtures.py

Writes tests/fixtures/mindspore/reader/ (no ``opt.ckpt`` there, so it is not a migration case):

    values.ckpt       ms.save_checkpoint of one tensor per MindSpore dtype the reader supports and
                      per rank (scalar, 1-d, 2-d, 5-d), with append_dict strings (ASCII, non-ASCII,
                      empty) and Python scalars (int, float, bool)
    values_crc.ckpt   the same with crc_check=True (a ``crc_num`` trailer)
    empty_crc.ckpt    ms.save_checkpoint([], ..., crc_check=True): only the 17-byte trailer
    bfloat16.ckpt     one BFloat16 tensor (MindSpore loads it; numpy has no bfloat16)
    adafactor.ckpt    ms.save_checkpoint(opt, ...) of nn.AdaFactor (defaults, beta1=0.9) after 2 steps on
                      Dense(4, 3): an optimizer gradxform does not migrate (state afactor_step,
                      exp_avg.<p>, exp_avg_sq_row_<p>, exp_avg_sq_col_<p>, exp_avg_sq_<p>)
    hand_<case>.ckpt  files MindSpore never writes, encoded here by hand (protobuf wire format) from
                      checkpoint.proto: numeric dims [0], dims [3, 0], dims [2, -1], 32 and 33 dims,
                      an empty tag, slices of one tag disagreeing on dims or type, a MapTensor entry
                      holding a field MapTensorProto lacks, one whose field 1 is cut short; what
                      ms.load_checkpoint makes of each (the arrays, or the first line of its error)
                      is in meta["hand"]
    expected.npz      meta (json): MindSpore's version, each tag's kind/dtype/shape (or string value)
                      in the order ms.load_checkpoint returns them, its message for empty_crc.ckpt;
                      a_<tag>: ms.load_checkpoint(values.ckpt)[tag].asnumpy()

The loader's answers are recorded, never computed here: each file is loaded back with
``ms.load_checkpoint`` (values_crc.ckpt with crc_check=True, and checked to give values.ckpt's).
"""
import json
import os
import shutil

import numpy as np

import mindspore as ms
import mindspore.common.dtype as mstype
from mindspore import Tensor, nn

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
_TMP = "/tmp/ms_reader_fixtures"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mindspore", "reader")

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "bool"]
SHAPES = {"s": (), "v": (3,), "m": (2, 3), "r5": (1, 2, 1, 3, 1)}
APPEND = {"s_ascii": "epoch 7", "s_unicode": "\u00e4\u03b2\u20ac\U0001F600", "s_empty": "", "py_int": 7,
          "py_float": 0.5, "py_bool": True}


def values(rng):
    out = []
    for dt in DTYPES:
        for sname, shape in SHAPES.items():
            if dt == "bool":
                a = rng.integers(0, 2, shape).astype(bool)
            elif dt.startswith(("int", "uint")):
                info = np.iinfo(dt)
                a = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
            else:
                a = (rng.standard_normal(shape) * 100).astype(dt)
            out.append({"name": f"t.{dt}.{sname}", "data": Tensor(a)})
    return out


def _varint(n):
    n &= (1 << 64) - 1  # int64: a negative number is its 10-byte two's complement
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _ld(field, payload):  # a length-delimited field
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _tensor(dims, ttype, content):  # TensorProto: dims = 1, tensor_type = 2, tensor_content = 3
    return b"".join(_varint(1 << 3) + _varint(d) for d in dims) + _ld(2, ttype.encode()) + _ld(3, content)


def _entry(tag, body, field=2):  # Checkpoint.value = 1: Value.tag = 1, .tensor = 2, .maptensor = 3
    return _ld(1, _ld(1, tag.encode()) + _ld(field, body))


_F32 = np.float32(1.5).tobytes()
HAND = {
    "dims0": _entry("w", _tensor([0], "Float32", _F32)),
    "dims3x0": _entry("w", _tensor([3, 0], "Float32", b"")),
    "dims_negative": _entry("w", _tensor([2, -1], "Float32", _F32 * 2)),
    "dims32": _entry("w", _tensor([1] * 32, "Float32", _F32)),
    "dims33": _entry("w", _tensor([1] * 33, "Float32", _F32)),
    "empty_tag": _entry("w", _tensor([], "Float32", _F32)) + _entry("", _tensor([], "Float32", _F32)),
    "slices_dims": _entry("w", _tensor([2, 1], "Float32", _F32)) + _entry("w", _tensor([2, 2], "Float32", _F32)),
    "slices_type": _entry("w", _tensor([2], "Float32", _F32)) + _entry("w", _tensor([2], "Int32", _F32)),
    "maptensor_unknown_field": _entry("w", _tensor([], "Float32", _F32)) + _entry("m", _ld(2, b"\xff\xff"), 3),
    "maptensor_corrupt": _entry("w", _tensor([], "Float32", _F32)) + _entry("m", b"\x0a\x05abc", 3),
}


def record_hand(path):
    try:
        loaded = ms.load_checkpoint(path)
        return {"loaded": {t: {"dtype": str(v.asnumpy().dtype), "shape": list(v.asnumpy().shape),
                               "hex": v.asnumpy().tobytes().hex()} for t, v in loaded.items()}}
    except Exception as e:  # noqa: BLE001  (its answer, whatever it is)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}


def record(path, **load_kw):
    loaded = ms.load_checkpoint(path, **load_kw)
    entries, arrays = [], {}
    for tag, v in loaded.items():
        if isinstance(v, str):
            entries.append({"tag": tag, "kind": "str", "value": v})
            continue
        a = v.asnumpy()
        arrays["a_" + tag] = a
        entries.append({"tag": tag, "kind": "array", "dtype": str(a.dtype), "shape": list(a.shape)})
    return entries, arrays


def main():
    shutil.rmtree(_TMP, ignore_errors=True)
    os.makedirs(_TMP)
    os.chdir(_TMP)
    rng = np.random.default_rng(28)
    params = values(rng)
    ms.save_checkpoint(params, "values.ckpt", append_dict=dict(APPEND))
    ms.save_checkpoint(params, "values_crc.ckpt", append_dict=dict(APPEND), crc_check=True)
    ms.save_checkpoint([], "empty_crc.ckpt", crc_check=True)
    ms.save_checkpoint([{"name": "bf", "data": Tensor(np.array([1.0, -2.5, 3.0], np.float32), mstype.bfloat16)}],
                       "bfloat16.ckpt")
    dense = nn.Dense(4, 3)
    opt = nn.AdaFactor(dense.trainable_params())
    for _ in range(2):
        opt(tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in dense.trainable_params()))
    ms.save_checkpoint(opt, "adafactor.ckpt")
    adafactor_tags = list(ms.load_checkpoint("adafactor.ckpt"))
    hand = {}
    for case, data in HAND.items():
        with open(f"hand_{case}.ckpt", "wb") as f:
            f.write(data)
        hand[case] = record_hand(f"hand_{case}.ckpt")
    entries, arrays = record("values.ckpt")
    entries_crc, arrays_crc = record("values_crc.ckpt", crc_check=True)
    assert entries == entries_crc and all(np.array_equal(arrays[k], arrays_crc[k]) for k in arrays)
    try:
        ms.load_checkpoint("empty_crc.ckpt", crc_check=True)
        empty_error = None
    except ValueError as e:
        empty_error = str(e).splitlines()[0]
    bf = ms.load_checkpoint("bfloat16.ckpt")["bf"]
    meta = {"framework": "mindspore", "framework_version": ms.__version__, "entries": entries,
            "empty_crc_error": empty_error, "adafactor_tags": adafactor_tags,
            "hand": hand,
            "bfloat16": {"dtype": str(bf.dtype), "shape": list(bf.shape),
                         "values": [float(x) for x in bf.astype(mstype.float32).asnumpy()]},
            "written": "ms.save_checkpoint(list of {'name', 'data': Tensor}, path, append_dict=...)"}
    os.makedirs(OUT, exist_ok=True)
    for name in ["values.ckpt", "values_crc.ckpt", "empty_crc.ckpt", "bfloat16.ckpt", "adafactor.ckpt",
                 *(f"hand_{case}.ckpt" for case in HAND)]:
        dst = os.path.join(OUT, name)
        if os.path.exists(dst):
            os.chmod(dst, 0o644)
            os.remove(dst)
        shutil.copyfile(name, dst)
        os.chmod(dst, 0o644)
    np.savez_compressed(os.path.join(OUT, "expected.npz"), meta=np.array(json.dumps(meta)), **arrays)
    print("ok", len(entries), "entries;", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
