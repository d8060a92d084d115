"""What each allowed global of a framework pickle may build (gradxform.migrate._recipes).

Two kinds of expected value:
* a stream CPython's pickler writes (numpy arrays, dtypes, scalars, bytes and bytearrays in every
  protocol; objects of a framework class, written with a stand-in class of the same module and name)
  must read as CPython's own ``pickle.loads`` reads it;
* a stream a pickler never writes (written here opcode by opcode) must be refused with the
  documented `UnsafePickleError` naming what is wrong, never another exception (a `MigrateError`
  "cannot read the pickle" would mean the recipe ran on input it should have refused).

Pure Python and NumPy: the whole file runs in well under a second.
"""
import os
import pickle
import struct
import sys
import types

import numpy as np
import pytest

from gradxform.migrate import MigrateError, UnsafePickleError
from gradxform.migrate._ndarray import RowSparse
from gradxform.migrate._pickle import safe_loads
from gradxform.migrate._recipes import MXNET_GLOBALS, NUMPY_GLOBALS, MXNDArray, PickledObject, record_class


class Op(bytes):
    """Opcodes, written into a stream as they are."""


def enc(x) -> bytes:
    """``x`` as protocol-3 opcodes (containers hold values or `Op`)."""
    if isinstance(x, Op):
        return bytes(x)
    if x is None:
        return b"N"
    if isinstance(x, bool):
        return b"\x88" if x else b"\x89"
    if isinstance(x, int):
        return b"J" + struct.pack("<i", x)
    if isinstance(x, float):
        return b"G" + struct.pack(">d", x)
    if isinstance(x, str):
        raw = x.encode("utf-8")
        return b"X" + struct.pack("<I", len(raw)) + raw
    if isinstance(x, bytes):
        return b"B" + struct.pack("<I", len(x)) + x
    if isinstance(x, tuple):
        return b"(" + b"".join(enc(i) for i in x) + b"t"
    if isinstance(x, list):
        return b"](" + b"".join(enc(i) for i in x) + b"e"
    if isinstance(x, dict):
        return b"}(" + b"".join(enc(k) + enc(v) for k, v in x.items()) + b"u"
    raise TypeError(type(x))


def G(mod, name):
    return Op(b"c" + mod.encode() + b"\n" + name.encode() + b"\n")


def R(fn, *args):
    return Op(enc(fn) + enc(tuple(args)) + b"R")


def NEW(cls, *args):
    return Op(enc(cls) + enc(tuple(args)) + b"\x81")


def B(obj, state):
    return Op(enc(obj) + enc(state) + b"b")


def loads(x):
    return safe_loads(b"\x80\x03" + enc(x) + b".", "t.pkl", allowed=(MXNET_GLOBALS, NUMPY_GLOBALS))


NDARRAY, DTYPE = G("numpy", "ndarray"), G("numpy", "dtype")
RECON, SCALAR = G("numpy.core.multiarray", "_reconstruct"), G("numpy.core.multiarray", "scalar")
FROMBUF = G("numpy.core.numeric", "_frombuffer")
SGD = G("mxnet.optimizer.optimizer", "SGD")
NDA = G("mxnet.ndarray.ndarray", "NDArray")
PLAIN = (3, "<", None, None, None, -1, -1, 0)  # numpy's dtype state of a plain type (dtype.__reduce__)


def dt(code="f4", state=PLAIN, args=(False, True)):
    return B(R(DTYPE, code, *args), state)


def arr(state, args=(NDARRAY, (0,), b"b")):
    return B(R(RECON, *args), state)


F4 = np.arange(6, dtype=np.float32).reshape(2, 3)


def f4_state(**kw):
    s = dict(version=1, shape=(2, 3), dtype=dt(), fortran=False, raw=F4.tobytes())
    s.update(kw)
    return (s["version"], s["shape"], s["dtype"], s["fortran"], s["raw"])


def same(a, b):
    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
    np.testing.assert_array_equal(a, b)


# -- what CPython's pickler writes reads as CPython reads it -----------------------------------

VALUES = {
    "c_order": F4, "f_order": np.asfortranarray(np.arange(12.0).reshape(3, 4)), "transposed": F4.T,
    "big_endian": np.arange(5, dtype=">i4") - 2, "bool": np.array([True, False, True]),
    "int8": np.array([-128, 0, 127], np.int8), "complex": np.array([1 + 2j, -3j], np.complex64),
    "empty": np.zeros((0, 3), np.float64), "rank0": np.array(2.5, np.float16),
    "scalar_f32": np.float32(1.25), "scalar_i64": np.int64(-(2**40)), "scalar_be": np.array([7], ">f8")[0],
    "dtype": np.dtype("f4"), "dtype_be": np.dtype(">i8"),
    "bytes": bytes(range(256)), "empty_bytes": b"", "bytearray": bytearray(range(256)),
    "empty_bytearray": bytearray(),
}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("name", VALUES)
def test_what_cpython_pickles_reads_as_cpython_reads_it(name, protocol):
    data = pickle.dumps(VALUES[name], protocol=protocol)
    want, got = pickle.loads(data), safe_loads(data, "t.pkl")
    if isinstance(want, np.ndarray):
        same(got, want.astype(want.dtype.newbyteorder("=")))  # read in native byte order
    elif isinstance(want, np.generic):
        assert type(got) is type(want) and got == want
    else:
        assert type(got) is type(want) and got == want
        if isinstance(want, np.dtype):
            assert got.isnative == want.isnative


class _Slotted:
    __slots__ = ("rate", "__dict__")


def _framework_object(monkeypatch, slotted: bool):
    """An object of class ``mxnet.optimizer.optimizer.SGD`` (a stand-in of that module and name,
    so that CPython's pickler writes what it writes for MXNet's own optimizer)."""
    for parent in ("mxnet", "mxnet.optimizer"):  # the pickler imports the module, parents first
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    mod = types.ModuleType("mxnet.optimizer.optimizer")
    cls = type("SGD", (_Slotted,) if slotted else (), {"__module__": mod.__name__})
    cls.__qualname__ = "SGD"
    mod.SGD = cls
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    obj = cls()
    obj.momentum, obj.lr_mult = 0.9, {"w": 2.0}
    if slotted:
        obj.rate = 0.5
    return obj


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_framework_object_reads_as_its_attributes(monkeypatch, protocol):
    got = safe_loads(pickle.dumps(_framework_object(monkeypatch, False), protocol=protocol), "t.pkl")
    assert isinstance(got, PickledObject) and got.cls_path == "mxnet.optimizer.optimizer.SGD"
    assert got.attrs == {"momentum": 0.9, "lr_mult": {"w": 2.0}} and got.momentum == 0.9
    assert got.class_name == "SGD" and type(got).__name__ == "SGD"
    assert isinstance(got, record_class("mxnet.optimizer.optimizer.SGD"))


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_a_slotted_objects_dict_and_slots_are_merged(monkeypatch, protocol):
    """Protocol 2+ writes a class with ``__slots__`` as the state ``(dict, slots)``."""
    got = safe_loads(pickle.dumps(_framework_object(monkeypatch, True), protocol=protocol), "t.pkl")
    assert got.attrs == {"momentum": 0.9, "lr_mult": {"w": 2.0}, "rate": 0.5}


@pytest.mark.parametrize("state, attrs", [
    (({"a": 1}, None), {"a": 1}),
    ((None, {"b": 2}), {"b": 2}),
    (({"a": 1, "b": 1}, {"b": 2}), {"a": 1, "b": 2}),  # a slot overrides the dict, as setattr would
    ((None, None), {}),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2}),  # a two-key dict is not a (dict, slots) pair
    ({}, {}),
])
def test_record_states(state, attrs):
    for obj in (NEW(SGD), R(SGD)):
        assert loads(B(obj, state)).attrs == attrs


@pytest.mark.parametrize("state, match", [
    (({"a": 1}, 5), "a \\(dict, slots\\) state of other types"),
    ((5, None), "a \\(dict, slots\\) state of other types"),
    ((["a"], {}), "a \\(dict, slots\\) state of other types"),
    (({"a": 1}, None, None), "expected an attribute dict with string keys.*got tuple"),
    (5, "expected an attribute dict with string keys.*got int"),
    (["a", "b"], "expected an attribute dict with string keys.*got list"),
    ({"a": 1, 2: 3}, "expected an attribute dict with string keys"),
    ({2: 3, "a": 1}, "expected an attribute dict with string keys"),
])
def test_record_states_refused(state, match):
    with pytest.raises(UnsafePickleError, match=match):
        loads(B(NEW(SGD), state))


def test_record_class_is_one_class_per_path():
    a = record_class("mxnet.lr_scheduler.FactorScheduler")
    assert a is record_class("mxnet.lr_scheduler.FactorScheduler") and a.__name__ == "FactorScheduler"
    assert a(()).class_name == "FactorScheduler" and a.cls_path == "mxnet.lr_scheduler.FactorScheduler"
    with pytest.raises(AttributeError, match="no attribute 'lr'"):
        a(()).lr
    # the class name is the path's last part: all of it when it has no dot
    plain = record_class("Plain")
    assert plain.__name__ == "Plain" and plain(()).class_name == "Plain" and repr(plain(())) == "<pickled Plain>"


# -- numpy dtypes ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, want", [
    (("f4",), np.float32), (("f4", False), np.float32), (("f4", False, True), np.float32),
    (("longlong", False, True), np.int64),  # 8 characters: the longest type code read
    (("?", False, True), np.bool_), (("u2", False, True), np.uint16), (("c16", False, True), np.complex128),
])
def test_dtype_arguments_read(args, want):
    got = loads(B(R(DTYPE, *args), PLAIN))
    assert got == np.dtype(want)


def test_a_dtype_without_build_is_native():
    """``dtype(code)`` is usable as it is (BUILD only sets a byte order)."""
    assert loads(R(DTYPE, "f8", False, True)) == np.dtype("f8")


@pytest.mark.parametrize("args", [(), ("f4", False, True, 0), (5,), ("complex64",), ("f4" * 5,)])
def test_dtype_arguments_refused(args):
    with pytest.raises(UnsafePickleError, match="only a type code is allowed"):
        loads(R(DTYPE, *args))


@pytest.mark.parametrize("code", ["O", "V8", "i4,i4", "(2,)i4", "M8", "U3", "S2"])
def test_dtypes_that_are_not_numbers_are_refused(code):
    with pytest.raises(UnsafePickleError, match="only bool, integer, float and complex"):
        loads(R(DTYPE, code, False, True))


@pytest.mark.parametrize("state, order", [
    (PLAIN, "<"), ((3, ">", None, None, None, -1, -1, 0), ">"), ((3, "|", None, None, None, -1, -1, 0), "="),
    ((3, "=", None, None, None, -1, -1, 0), "="), ((4, "<", None, None, None, -1, -1, 0, None), "<"),
    ((3, ">", None, None, None, -1, -1, 0, None), ">"),
])
def test_dtype_states_read(state, order):
    got = loads(dt("i4", state))
    want = np.dtype("i4").newbyteorder(order)
    assert got == want and got.isnative == want.isnative


BAD_DTYPE_STATES = {
    "list": [3, "<", None, None, None, -1, -1, 0],
    "7 items": PLAIN[:7], "10 items": PLAIN + (None, None),
    "version 2": (2,) + PLAIN[1:], "version 5": (5,) + PLAIN[1:],
    "order": (3, "x", None, None, None, -1, -1, 0), "subdescr": (3, "<", 1, None, None, -1, -1, 0),
    "names": (3, "<", None, ("a",), None, -1, -1, 0), "fields": (3, "<", None, None, {}, -1, -1, 0),
    "elsize": (3, "<", None, None, None, 4, -1, 0), "alignment": (3, "<", None, None, None, -1, 4, 0),
    "flags": (3, "<", None, None, None, -1, -1, 1), "metadata": PLAIN + ({"unit": 1},),
}


@pytest.mark.parametrize("name", BAD_DTYPE_STATES)
def test_dtype_states_refused(name):
    with pytest.raises(UnsafePickleError, match="numpy dtype state .* is not a plain"):
        loads(dt("i4", BAD_DTYPE_STATES[name]))


# -- numpy arrays and scalars ------------------------------------------------------------------

def test_array_states_read():
    same(loads(arr(f4_state())), F4)
    same(loads(arr(f4_state()[1:])), F4)  # (shape, dtype, is_fortran, rawdata) without the version
    same(loads(arr(f4_state(shape=[2, 3]))), F4)
    same(loads(arr(f4_state(fortran=True, raw=np.asfortranarray(F4).tobytes(order="F")))), F4)
    # is_fortran 1: the bytes are read in column order (numpy's ``ndarray.__setstate__``)
    same(loads(arr(f4_state(fortran=1, raw=F4.T.tobytes()))), F4)


@pytest.mark.parametrize("state, match", [
    (f4_state(version=2), "is not \\(shape, dtype, is_fortran, rawdata\\)"),
    (f4_state(fortran=2), "is not \\(shape, dtype, is_fortran, rawdata\\)"),
    (f4_state()[2:], "is not \\(shape, dtype, is_fortran, rawdata\\)"),
    (list(f4_state()), "is not \\(shape, dtype, is_fortran, rawdata\\)"),
    (f4_state(dtype="f4"), "numpy array: the dtype is a str, not a numpy.dtype record"),
    (f4_state(dtype=arr(f4_state())), "numpy array: the dtype is a _Pending, not a numpy.dtype record"),
    (f4_state(raw=F4.tobytes()[:-1]), "23 data bytes for shape \\(2, 3\\) of float32 \\(needs 24\\)"),
    (f4_state(raw=5), "the array data are a int, not bytes"),
])
def test_array_states_refused(state, match):
    with pytest.raises(MigrateError, match=match) as err:
        loads(arr(state))
    assert "cannot read the pickle" not in str(err.value)


@pytest.mark.parametrize("args", [
    (NDARRAY, (0,)), (G("builtins", "object"), (0,), b"b"), (NDARRAY, (0,), b"b", 0), (DTYPE, (0,), b"b"),
])
def test_reconstruct_is_plain_ndarray_only(args):
    with pytest.raises(UnsafePickleError, match="only plain numpy.ndarray is allowed"):
        loads(R(RECON, *args))


def test_an_array_never_built_is_refused():
    with pytest.raises(UnsafePickleError, match="never given its data"):
        loads(R(RECON, NDARRAY, (0,), b"b"))
    with pytest.raises(UnsafePickleError, match="never given its data"):
        loads(NEW(NDA))


def test_scalars():
    got = loads(R(SCALAR, dt("f8"), struct.pack("<d", -1.5)))
    assert type(got) is np.float64 and got == -1.5
    got = loads(R(SCALAR, dt("i2", (3, ">", None, None, None, -1, -1, 0)), struct.pack(">h", -2)))
    assert type(got) is np.int16 and got == -2
    for args, match in (((dt("f8"),), "expected \\(dtype, bytes\\)"),
                        ((dt("f8"), b"\0" * 8, 0), "expected \\(dtype, bytes\\)"),
                        (("f8", b"\0" * 8), "the dtype is a str, not a numpy.dtype record"),
                        ((dt("f8"), b"\0" * 4), "4 data bytes")):
        with pytest.raises(MigrateError, match=match) as err:
            loads(R(SCALAR, *args))
        assert "cannot read the pickle" not in str(err.value)


def test_frombuffer():
    """numpy's protocol-5 rebuild, written as the pickler writes it (order 'C', or 'F' for an
    F-contiguous array) and by hand for the refusals."""
    c = np.arange(12, dtype=np.int32).reshape(3, 4)
    same(loads(R(FROMBUF, c.tobytes(), dt("i4"), (3, 4), "C")), c)
    same(loads(R(FROMBUF, c.tobytes(order="F"), dt("i4"), (3, 4), "F")), c)
    same(loads(R(FROMBUF, c.tobytes(), dt("i4"), (3, 4), "F")), np.frombuffer(c.tobytes(), np.int32)
         .reshape((3, 4), order="F"))
    for args in ((c.tobytes(), dt("i4"), (3, 4)), (c.tobytes(), dt("i4"), (3, 4), "A"),
                 (c.tobytes(), dt("i4"), (3, 4), "C", 0)):
        with pytest.raises(UnsafePickleError, match="expected \\(buffer, dtype, shape, 'C'\\|'F'\\)"):
            loads(R(FROMBUF, *args))


# -- bytes, bytearrays, codecs -----------------------------------------------------------------

BYTEARRAY, BYTES, ENCODE = G("builtins", "bytearray"), G("builtins", "bytes"), G("_codecs", "encode")
LATIN = bytes(range(256)).decode("latin-1")


def test_bytearray_and_bytes_forms():
    assert loads(R(BYTEARRAY)) == bytearray()
    assert loads(R(BYTEARRAY, LATIN, "latin-1")) == bytearray(range(256))
    assert loads(R(BYTEARRAY, b"\x00\xff")) == bytearray(b"\x00\xff")
    assert loads(R(BYTES)) == b""
    assert loads(R(ENCODE, LATIN, "latin1")) == bytes(range(256))
    assert loads(R(ENCODE, "\xe9")) == "\xe9".encode("utf-8")  # one argument: utf-8, as _codecs.encode
    for codec in ("latin-1", "LATIN_1", "utf-8", "UTF8", "ascii", "iso-8859-1"):
        assert loads(R(ENCODE, "ab", codec)) == b"ab"


@pytest.mark.parametrize("x, match", [
    (R(BYTEARRAY, "abc"), "only from bytes or text"),
    (R(BYTEARRAY, 5, "latin-1"), "only from bytes or text"),
    (R(BYTEARRAY, "abc", 5), "only from bytes or text"),
    (R(BYTEARRAY, b"a", b"b"), "only from bytes or text"),
    (R(BYTEARRAY, 10), "only from bytes or text"),
    (R(BYTEARRAY, "abc", "utf-16"), "codec 'utf-16' is not allowed"),
    (R(BYTES, b"a"), "only bytes\\(\\) is allowed"),
    (R(ENCODE), "expected \\(text, codec\\)"),
    (R(ENCODE, 5, "latin1"), "expected \\(text, codec\\)"),
    (R(ENCODE, "a", 5), "expected \\(text, codec\\)"),
    (R(ENCODE, "a", "latin1", "strict"), "expected \\(text, codec\\)"),
    (R(ENCODE, "a", "rot13"), "codec 'rot13' is not allowed"),
])
def test_bytes_forms_refused(x, match):
    with pytest.raises(UnsafePickleError, match=match):
        loads(x)


# -- protocol 0/1 objects: copyreg._reconstructor ------------------------------------------------

RECONSTRUCTOR, OBJECT = G("copyreg", "_reconstructor"), G("builtins", "object")


def test_reconstructor():
    got = loads(B(R(RECONSTRUCTOR, SGD, OBJECT, None), {"lr": 0.1}))
    assert isinstance(got, PickledObject) and got.attrs == {"lr": 0.1} and got.args == ()
    for args in ((SGD, OBJECT), (SGD, OBJECT, None, None), (DTYPE, OBJECT, None), (SGD, SGD, None),
                 (SGD, BYTEARRAY, None), (SGD, OBJECT, 5), (OBJECT, OBJECT, None)):
        with pytest.raises(UnsafePickleError, match="only framework records on object are allowed"):
            loads(R(RECONSTRUCTOR, *args))


# -- MXNet NDArrays ------------------------------------------------------------------------------

ND = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mxnet", "ndarray_raw.npz"))


def test_ndarray_handles():
    dense = loads(B(NEW(NDA), {"handle": ND["raw_float32"].tobytes()}))
    assert isinstance(dense, MXNDArray)
    same(dense.value, ND["want_float32"])
    rsp = loads(B(R(NDA), {"handle": ND["raw_rsp"].tobytes()}))
    assert isinstance(rsp.value, RowSparse)  # kept sparse: the reader of the state densifies it
    np.testing.assert_array_equal(rsp.value.dense(), ND["want_rsp"])
    assert loads(B(NEW(NDA), {"handle": None})).value is None  # NDArray.__getstate__ of no handle
    assert isinstance(loads(B(NEW(NDA), {"handle": None, "writable": True})), MXNDArray)


@pytest.mark.parametrize("state, match", [
    ({"data": b""}, "expected \\{'handle': bytes\\}"), (5, "expected \\{'handle': bytes\\}"),
    ([b"handle"], "expected \\{'handle': bytes\\}"), ({"handle": 5}, "the handle is int, not bytes"),
])
def test_ndarray_states_refused(state, match):
    with pytest.raises(UnsafePickleError, match=match):
        loads(B(NEW(NDA), state))
