"""Reading a MindSpore optimizer checkpoint (``.ckpt``, protobuf) without MindSpore.

Schema (``mindspore/train/checkpoint.proto``, proto2, no package; see
``tools/MINDSPORE_NOTES.md`` section 8)::

    message Checkpoint {
      message Value { required string tag = 1;
                      oneof value { TensorProto tensor = 2; MapTensorProto maptensor = 3; } }
      repeated Value value = 1;
    }
    message TensorProto { repeated int64 dims = 1; required string tensor_type = 2;
                          required bytes tensor_content = 3; }
    message MapTensorProto { repeated TensorProto tensor = 1; }

The file is a concatenation of one-``Value`` messages (so it parses as one
``Checkpoint``); a tensor over 512 MiB is split along axis 0 into consecutive
values with the same tag, each carrying the full dims; a ``crc_num`` trailer
(``crc_check=True``) is checked and stripped. The message classes are built
here at runtime from a ``descriptor_pb2`` description: no generated code.
"""
from __future__ import annotations

import binascii
import os
from functools import lru_cache

import numpy as np

from ._pickle import MigrateError

__all__ = ["read_mindspore_checkpoint", "from_mindspore_checkpoint"]

WHO = "from_mindspore_checkpoint"

_DTYPES = {"Float32": "<f4", "Float16": "<f2", "Float64": "<f8", "Int8": "i1", "UInt8": "u1",
           "Int16": "<i2", "UInt16": "<u2", "Int32": "<i4", "UInt32": "<u4", "Int64": "<i8",
           "UInt64": "<u8", "Bool": "?"}


@lru_cache(maxsize=1)
def _checkpoint_class():
    from google.protobuf import descriptor_pb2, descriptor_pool  # noqa: PLC0415  (optional extra)
    try:
        from google.protobuf.message_factory import GetMessageClass  # noqa: PLC0415
    except ImportError:  # protobuf < 4.22
        from google.protobuf import message_factory  # noqa: PLC0415

        def GetMessageClass(desc):  # noqa: N802
            return message_factory.MessageFactory(desc.file.pool).GetPrototype(desc)

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="gradxform_ms_checkpoint.proto", package="gradxform_ms",
                                             syntax="proto2")

    def field(msg, name, number, label, ftype, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, label=label, type=ftype)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof

    tensor = fdp.message_type.add(name="TensorProto")
    field(tensor, "dims", 1, F.LABEL_REPEATED, F.TYPE_INT64)
    field(tensor, "tensor_type", 2, F.LABEL_REQUIRED, F.TYPE_STRING)
    field(tensor, "tensor_content", 3, F.LABEL_REQUIRED, F.TYPE_BYTES)
    maptensor = fdp.message_type.add(name="MapTensorProto")
    field(maptensor, "tensor", 1, F.LABEL_REPEATED, F.TYPE_MESSAGE, ".gradxform_ms.TensorProto")
    ckpt = fdp.message_type.add(name="Checkpoint")
    value = ckpt.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "tag", 1, F.LABEL_REQUIRED, F.TYPE_STRING)
    field(value, "tensor", 2, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, ".gradxform_ms.TensorProto", oneof=0)
    field(value, "maptensor", 3, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, ".gradxform_ms.MapTensorProto", oneof=0)
    field(ckpt, "value", 1, F.LABEL_REPEATED, F.TYPE_MESSAGE, ".gradxform_ms.Checkpoint.Value")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return GetMessageClass(pool.FindMessageTypeByName("gradxform_ms.Checkpoint"))


def read_mindspore_checkpoint(fname) -> dict[str, object]:
    """``{tag: numpy array}`` (strings as ``str``) from a MindSpore ``.ckpt``.

    Needs the ``protobuf`` package (``pip install gradxform[migrate]``).
    Raises `MigrateError` for a truncated, corrupt, encrypted or CRC-failing file.
    """
    if hasattr(fname, "read"):
        data, label = fname.read(), getattr(fname, "name", "<file>")
    else:
        label = os.fspath(fname)
        with open(label, "rb") as f:
            data = f.read()
    what = f"{WHO}({label!r})"
    if len(data) >= 17 and data[-17:-10] == b"crc_num":
        want = int.from_bytes(data[-10:], "big")
        if binascii.crc32(data[:-17]) & 0xFFFFFFFF != want:
            raise MigrateError(f"{what}: the CRC check failed; the file is corrupt or truncated.")
        data = data[:-17]
    try:
        from google.protobuf.message import DecodeError  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover - the extra is declared
        raise ImportError("from_mindspore_checkpoint needs protobuf: pip install 'gradxform[migrate]'") from err
    msg = _checkpoint_class()()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise MigrateError(f"{what}: not a readable MindSpore checkpoint ({err}); the file is truncated, "
                           "corrupt, or encrypted (enc_key).") from None
    if not msg.value:
        raise MigrateError(f"{what}: the checkpoint holds no tensors.")
    out: dict[str, object] = {}
    pieces: list[tuple[str, object, list]] = []  # consecutive slices with one tag are joined
    for v in msg.value:
        if v.WhichOneof("value") != "tensor":
            raise MigrateError(f"{what}: entry {v.tag!r} is a MapTensor (a MapParameter); not supported.")
        t = v.tensor
        if pieces and pieces[-1][0] == v.tag:
            if list(t.dims) != pieces[-1][1] or t.tensor_type != pieces[-1][2]:
                raise MigrateError(f"{what}: slices of {v.tag!r} disagree on dims or type.")
            pieces[-1][3].append(t.tensor_content)
        else:
            if any(p[0] == v.tag for p in pieces):
                raise MigrateError(f"{what}: tag {v.tag!r} appears twice.")
            pieces.append((v.tag, list(t.dims), t.tensor_type, [t.tensor_content]))
    for tag, dims, ttype, chunks in pieces:
        raw = b"".join(chunks)
        if ttype == "str":
            out[tag] = np.frombuffer(raw, f"<U{len(raw) // 4}")[0] if raw else ""
            continue
        if ttype not in _DTYPES:
            raise MigrateError(f"{what}: {tag!r} has tensor type {ttype!r}, which is not supported.")
        dt = np.dtype(_DTYPES[ttype])
        shape = () if dims in ([], [0]) else tuple(int(d) for d in dims)
        n = int(np.prod(shape, dtype=np.int64))
        if len(raw) != n * dt.itemsize:
            raise MigrateError(f"{what}: {tag!r} holds {len(raw)} bytes; dims {shape} of {ttype} need "
                               f"{n * dt.itemsize} (truncated or corrupt).")
        out[tag] = np.frombuffer(raw, dt).reshape(shape).astype(dt.newbyteorder("="))
    return out
