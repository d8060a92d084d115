"""The pickle reader behind the Gluon and Paddle migration (gradxform.migrate._pickle): hostile files.

Every file here is either read exactly or refused with `MigrateError`
(`UnsafePickleError` for a construct a state file never needs); nothing it
names runs (a marker file a payload would create must not exist afterwards),
and what the reader allocates is bounded by the file's length (measured with
tracemalloc, which sees numpy's buffers too).
"""
import io
import os
import pickle
import struct
import sys
import tracemalloc
import warnings

import jax
import numpy as np
import pytest

import gradxform.migrate as gx_migrate
from gradxform.migrate import MigrateError, UnsafePickleError, read_gluon_states, read_paddle_state_dict
from gradxform.migrate._state import MAX_COUNT
from gradxform.migrate._pickle import MXNET_GLOBALS, NUMPY_GLOBALS, RowSparse, decode_ndarray, safe_loads

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
P4 = b"\x80\x04"


def loads(data: bytes):
    return safe_loads(data, "test", (MXNET_GLOBALS, NUMPY_GLOBALS))


def glob4(module: str, name: str) -> bytes:
    """STACK_GLOBAL for module.name (protocol 4)."""
    m, n = module.encode(), name.encode()
    return b"\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(n)]) + n + b"\x93"


def sbytes(b: bytes) -> bytes:
    return (b"C" + bytes([len(b)]) if len(b) < 256 else b"B" + struct.pack("<I", len(b))) + b


def sunicode(s: str) -> bytes:
    e = s.encode()
    return b"\x8c" + bytes([len(e)]) + e


def np_dtype(code: str, state: bytes | None = None) -> bytes:
    out = glob4("numpy", "dtype") + sunicode(code) + b"\x89\x88\x87R"  # dtype(code, False, True)
    if state is not None:
        out += state + b"b"
    return out


def marker_payloads(marker: str) -> dict[str, bytes]:
    """Ways a pickle can name a command; each would touch ``marker`` if it ran."""
    cmd = f"touch {marker}"
    c = cmd.encode()
    return {
        "reduce_p0": b"cos\nsystem\n(S'" + c + b"'\ntR.",
        "reduce_posix": b"cposix\nsystem\n(S'" + c + b"'\ntR.",
        "stack_global": P4 + glob4("os", "system") + sunicode(cmd) + b"\x85R.",
        "inst": b"(S'" + c + b"'\nios\nsystem\n.",
        "obj": b"(cos\nsystem\nS'" + c + b"'\no.",
        "newobj": P4 + glob4("subprocess", "Popen") + sunicode(cmd) + b"\x85\x81.",
        "eval": P4 + glob4("builtins", "eval") + sunicode(f"__import__('os').system({cmd!r})") + b"\x85R.",
        "getattr": P4 + glob4("builtins", "getattr") + glob4("os", "system") + b"\x85R.",
        "copyreg_os": P4 + glob4("copyreg", "_reconstructor") + glob4("os", "system")
        + glob4("builtins", "object") + b"N\x87R.",
        "reduce_on_allowed_object": P4 + glob4("builtins", "object") + sunicode(cmd) + b"\x85R.",
        "ndarray_call": P4 + glob4("numpy", "ndarray") + b")" + sunicode("O") + b"\x86R.",
        "nested_in_state": P4 + b"}K\x00" + glob4("os", "system") + sunicode(cmd) + b"\x85R\x85s.",
        "persistent_id": b"(S'" + c + b"'\nP0\n.",
        "ext_code": P4 + b"\x82\x01.",
        "newobj_ex": P4 + glob4("os", "system") + b")}\x92.",
    }


@pytest.mark.parametrize("name", sorted(marker_payloads("x")))
def test_command_payloads_refused_without_running(tmp_path, name):
    marker = tmp_path / "pwned"
    data = marker_payloads(str(marker))[name]
    for reader in (read_gluon_states, read_paddle_state_dict):
        with pytest.raises(MigrateError):
            reader(io.BytesIO(data))
    assert not marker.exists()


def test_pickle_module_would_have_run_the_marker_payload(tmp_path):
    """The corpus is real: the standard unpickler runs the first payload."""
    marker = tmp_path / "pwned"
    pickle.loads(marker_payloads(str(marker))["stack_global"])
    assert marker.exists()


# numpy's array pickle: _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype, fortran, raw).
PLAIN_DTYPE_STATE = b"K\x03" + sunicode("<") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"


def np_array(shape: tuple, dtype_code: str, raw: bytes, dtype_state: bytes = b"(" + PLAIN_DTYPE_STATE,
             build: bool = True) -> bytes:
    out = (glob4("numpy.core.multiarray", "_reconstruct") + glob4("numpy", "ndarray") + b"K\x00\x85"
           + sbytes(b"b") + b"\x87R")
    if build:
        shp = b"(" + b"".join(b"K" + bytes([d]) for d in shape) + b"t"
        out += b"(K\x01" + shp + np_dtype(dtype_code, dtype_state) + b"\x89" + sbytes(raw) + b"tb"
    return out


def test_handmade_array_pickle_reads_like_numpy():
    a = loads(P4 + np_array((2, 3), "f4", np.arange(6, dtype="<f4").tobytes()) + b".")
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert a.dtype == np.float32 and a.flags.writeable


@pytest.mark.parametrize("data, match", [
    # the reported SIGSEGV: an object array whose pointer is bytes from the file
    (P4 + glob4("numpy", "ndarray") + b")" + sunicode("O") + sbytes(b"A" * 8) + b"\x87R.", "cannot be called"),
    (P4 + np_array((1,), "O", b"A" * 8) + b".", "not allowed"),
    (P4 + np_array((1,), "V8", b"A" * 8) + b".", "not allowed"),
    (P4 + np_array((1,), "f8", b"A" * 8, dtype_state=b"(K\x03" + sunicode("<")
                   + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x3ft") + b".", "flags"),  # hasobject flags
    (P4 + np_array((1,), "f8", b"A" * 8, dtype_state=b"(K\x03" + sunicode("|") + b"N(" + sunicode("x")
                   + b"t}NJ\xff\xff\xff\xffK\x00t") + b".", "not a plain"),  # fields smuggled in
    (P4 + np_array((4,), "f4", b"", build=False) + b".", "uninitialised"),
    (P4 + np_array((4,), "f4", b"\0" * 8) + b".", "data bytes"),  # too few bytes for the shape
    (P4 + np_array((2,), "f4", b"\0" * 12) + b".", "data bytes"),  # too many
    (P4 + glob4("numpy.core.multiarray", "scalar") + np_dtype("O") + sbytes(b"A" * 8) + b"\x86R.",
     "not allowed"),
    (P4 + glob4("numpy.core.numeric", "_frombuffer") + sbytes(b"A" * 8) + np_dtype("O") + b"K\x01\x85"
     + sunicode("C") + b"(tR.", "not allowed|expected"),
    (P4 + np_dtype("f4") + b"}" + sunicode("__defaults__") + b"K\x01sb.", "not a plain"),
], ids=["ndarray_object_pointer", "object_dtype", "void_dtype", "dtype_flags", "dtype_fields", "no_build",
        "short_data", "long_data", "object_scalar", "frombuffer_object", "dtype_build_dict"])
def test_memory_unsafe_arrays_refused(data, match):
    with pytest.raises(UnsafePickleError if "data bytes" not in match else MigrateError, match=match):
        loads(data)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        try:
            fn()
        except MigrateError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


FAR_MEMO = (P4 + b"N\x94" + b"r\x00\x00\x00\x04.",  # memo index 2**26
            b"Nr\xff\xff\xff\xff.")                 # memo index 2**32 - 1


@pytest.mark.parametrize("data", [
    *FAR_MEMO,
    P4 + glob4("builtins", "bytearray") + b"J\x00\x2f\x68\x59\x85R.",  # bytearray(1.5e9)
    P4 + b"\x8e" + struct.pack("<Q", 1 << 40) + b"x" * 16,        # BINBYTES8 of 2**40
    P4 + b"\x95" + struct.pack("<Q", 1 << 62) + b"N.",            # a frame of 2**62
    P4 + b"\x8b" + struct.pack("<I", 1 << 31) + b"\xff" * 64,     # LONG4 of 2 GiB
    b"L" + b"9" * 100000 + b"\n.",                                # a huge text integer
    P4 + b"(" * 100000 + b".",                                    # marks without end
    P4 + b"]" * 5000 + b"a" * 4999 + b".",                        # lists nested 5,000 deep
    P4 + b"]\x94h\x00a.",                                         # a list holding itself
], ids=["memo_2_26", "memo_2_32", "bytearray_1_5e9", "binbytes8_2_40", "frame_2_62", "long4_2gib", "long_text",
        "marks", "deep_lists", "cycle"])
def test_amplification_and_structure_bounded(data):
    peak = peak_bytes(lambda: loads(data))
    assert peak < 4 * len(data) + (8 << 20), peak
    if data in FAR_MEMO:  # legal, and costs one dict entry
        assert loads(data) is None
    else:
        with pytest.raises(MigrateError):
            loads(data)


def test_shared_raw_bytes_cannot_multiply_arrays():
    """One memoised 1 MiB buffer referenced by 64 arrays would make 64 MiB: over budget."""
    raw = np.zeros(1 << 18, np.float32).tobytes()
    one = (glob4("numpy.core.multiarray", "_reconstruct") + glob4("numpy", "ndarray") + b"K\x00\x85"
           + sbytes(b"b") + b"\x87R(K\x01(J" + struct.pack("<i", 1 << 18) + b"t"
           + np_dtype("f4", b"(" + PLAIN_DTYPE_STATE) + b"\x89h\x00tb")
    data = P4 + sbytes(raw) + b"q\x00" + b"0" + b"(" + one * 64 + b"l."
    with pytest.raises(MigrateError, match="size allows"):
        loads(data)
    np.testing.assert_array_equal(loads(P4 + sbytes(raw) + b"q\x000(" + one * 2 + b"l.")[1], 0)


def test_row_sparse_stays_sparse_until_checked():
    """A 40-byte NDArray claiming shape (2**40, 2**20) is not expanded by the reader."""
    raw = (struct.pack("<Ii", 0xF993FAC9, 1) + struct.pack("<iqq", 2, 0, 1 << 20)
           + struct.pack("<iqq", 2, 1 << 40, 1 << 20) + struct.pack("<iii", 1, 0, 0)
           + struct.pack("<iiq", 6, 1, 0))
    rs = decode_ndarray(raw, sparse=True)
    assert isinstance(rs, RowSparse) and rs.shape == (1 << 40, 1 << 20) and len(rs.rows) == 0


@pytest.mark.parametrize("obj", [
    {"a": np.arange(5.0), "b": [1, 2.5, None, True], "c": (b"x", "y"), "d": {"e": np.float32(1.5)}},
    {"w_d_0": np.ones((2, 3), np.float16), "w_m_0": np.array([3], np.int64), "n": -7, "big": 2**70},
    {"fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "be": np.arange(3, dtype=">i4"),
     "empty": b"", "ba": bytearray(b"xy"), "bool": np.array([True, False]), "c64": np.array([1 + 2j])},
])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_values_round_trip_every_protocol(obj, protocol):
    got = loads(pickle.dumps(obj, protocol=protocol))
    assert set(got) == set(obj)
    for k, v in obj.items():
        if isinstance(v, np.ndarray):
            assert got[k].dtype == v.dtype.newbyteorder("=") and got[k].shape == v.shape
            np.testing.assert_array_equal(got[k], v)
        else:
            assert got[k] == v and type(got[k]) is type(v), k


def _fixture_files(ext: str) -> list[str]:
    out = []
    for root, _, files in os.walk(FIXTURES):
        out += [os.path.join(root, f) for f in files if f.endswith(ext)]
    return sorted(out)


def _mutations(data: bytes, rng: np.random.Generator, n: int):
    for _ in range(n):
        b = bytearray(data)
        kind = rng.integers(5)
        if kind == 0:  # bit flips
            for _ in range(rng.integers(1, 4)):
                i = rng.integers(len(b))
                b[i] ^= 1 << rng.integers(8)
        elif kind == 1:  # truncation
            del b[rng.integers(len(b)):]
        elif kind == 2:  # insertion
            i = rng.integers(len(b))
            b[i:i] = rng.bytes(rng.integers(1, 9))
        elif kind == 3:  # deletion
            i = rng.integers(len(b))
            del b[i:i + rng.integers(1, 9)]
        else:  # a byte replaced by an interesting value
            b[rng.integers(len(b))] = int(rng.choice([0, 0x7F, 0x80, 0xFF, ord("R"), ord("b"), ord("c")]))
        yield bytes(b)


def fuzz_reader(reader, files, per_file, seed):
    rng = np.random.default_rng(seed)
    outcomes = {"refused": 0, "loaded": 0}
    for path in files:
        data = open(path, "rb").read()
        budget = 4 * len(data) + (8 << 20)
        for mutated in _mutations(data, rng, per_file):
            tracemalloc.start()
            try:
                reader(io.BytesIO(mutated))
                outcomes["loaded"] += 1
            except MigrateError:
                outcomes["refused"] += 1
            finally:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            assert peak < budget, (path, peak)
    return outcomes


def test_fuzz_framework_files(request):
    """Mutated Gluon and Paddle files: loaded or MigrateError, never another exception, never unbounded
    memory. ``--slow`` runs 20x more mutations."""
    scale = 20 if request.config.getoption("--slow", default=False) else 1
    gluon = fuzz_reader(read_gluon_states, _fixture_files(".states")[:6], 40 * scale, seed=0)
    paddle = fuzz_reader(read_paddle_state_dict, _fixture_files(".pdopt"), 80 * scale, seed=1)
    assert gluon["refused"] > 0 and paddle["refused"] > 0


def _state_is_sane(state) -> bool:
    for leaf in jax.tree.leaves(state):
        a = np.asarray(leaf)
        if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
            return False
        if np.issubdtype(a.dtype, np.integer) and a.size and (a.min() < 0 or a.max() > MAX_COUNT):
            return False
    return True


@pytest.mark.parametrize("family, case", [("gluon", "adam"), ("gluon", "sgd_mom_clip_sched"),
                                          ("paddle", "asgd_batch3_wd_stepdecay")])
def test_fuzz_resume_loads_sane_state_or_refuses(request, family, case):
    """The whole reader, values included: a mutated file gives MigrateError, or a state with finite
    floats and counts in [0, 2**31 - 2] (a flipped bit inside an array's data is a different but valid
    file; no format here has a checksum to tell)."""
    if family == "gluon":
        import test_migrate_gluon as t  # noqa: PLC0415
        z, meta = t.load(case)
        path, reader, params = t.states_file(case, meta), gx_migrate.from_gluon_states, t.params_at(z, meta, 4)
    else:
        import test_migrate_paddle as t  # noqa: PLC0415
        z, meta = t.load(case)
        path, reader, params = t.pdopt(case), gx_migrate.from_paddle_state_dict, t.params_at(z, meta, 4)
    tx = t.make_tx(meta)
    n = 60 * (20 if request.config.getoption("--slow", default=False) else 1)
    data = open(path, "rb").read()
    outcomes = {"refused": 0, "loaded": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hyperparameter-mismatch warnings from mutated attributes
        for mutated in _mutations(data, np.random.default_rng(len(case)), n):
            try:
                state = reader(io.BytesIO(mutated), params, tx)
            except MigrateError:
                outcomes["refused"] += 1
                continue
            outcomes["loaded"] += 1
            assert _state_is_sane(state)
    assert outcomes["refused"] > n // 4, outcomes


# --- the reader's bounds at their documented values (issue 28 item 2: mutation testing) -------------
# Each bound is the module docstring's or its constant's comment; values a state file can hold are read
# as CPython's own unpickler reads them (``pickle.loads``: the reference for the format), one step past a
# bound is refused with the documented message.

def _tuple_levels(n: int, inner=()):
    """A tuple ``n`` levels deep: ``((((),),),)`` (the innermost ``()`` is level 1)."""
    t = inner
    for _ in range(n - 1):
        t = (t,)
    return t


def _nested(kind: str, n: int):
    """``n`` levels of lists, dicts, or lists and tuples alternating (the innermost empty)."""
    x = {"list": [], "dict": {}, "mixed": ()}[kind]
    for i in range(n - 1):
        x = [x] if kind == "list" or (kind == "mixed" and i % 2 == 0) else {1: x} if kind == "dict" else (x,)
    return x


@pytest.mark.parametrize("protocol", [0, 2, 4])
@pytest.mark.parametrize("kind", ["tuple", "list", "dict", "mixed"])
def test_nesting_bound_is_100_levels(kind, protocol):
    """``_MAX_DEPTH`` = 100 levels of containers, counted alike for tuples (when built) and for every
    container (when the result is walked): 100 are read, 101 refused."""
    make = _tuple_levels if kind == "tuple" else lambda n: _nested(kind, n)
    ok = make(100)
    assert loads(pickle.dumps(ok, protocol)) == pickle.loads(pickle.dumps(ok, protocol))
    # a tuple is refused when built (its hash never runs), the others when the result is walked
    match = "tuples nested more than 100 deep" if kind == "tuple" else "the pickle is nested more than 100 deep"
    with pytest.raises(MigrateError, match=match):
        loads(pickle.dumps(make(101), protocol))


@pytest.mark.parametrize("inner, depth", [(frozenset(), 1), (frozenset({1, "a"}), 1),
                                          (frozenset({((), (), ()), 1}), 3)])
def test_a_frozensets_depth_counts_its_items(inner, depth):
    """A frozenset is one level above its deepest item (a scalar is no level; ``((), (), ())`` is 2),
    counted when the tuple above it is built."""
    ok = _tuple_levels(101 - depth, inner)
    assert loads(pickle.dumps(ok, 4)) == ok
    with pytest.raises(MigrateError, match="tuples nested more than 100 deep"):
        loads(pickle.dumps((ok,), 4))


def test_wide_tuples_are_not_deep():
    """Depth is levels, not tuples: 300 tuples side by side, 99 levels under them, are read."""
    wide = _tuple_levels(98, ((),) * 300)
    assert loads(pickle.dumps(wide, 4)) == wide


@pytest.mark.parametrize("key, ok", [
    (((),) * 255, True),                  # the key and 255 tuples: 256 visited
    (((),) * 256, False),
    (((((),),),) * 85, True),             # 1 + 85 x 3 = 256
    ((((),),) * 128, False),              # 1 + 128 x 2 = 257
    ((frozenset({((),)}),) * 255, True),  # a frozenset's hash is cached: it counts 1
    ((frozenset({((),)}),) * 256, False),
])
def test_a_dict_keys_hash_visits_at_most_256_tuples(key, ok):
    data = pickle.dumps({key: 1}, 4)
    if ok:
        assert loads(data) == {key: 1}
    else:
        with pytest.raises(MigrateError, match="would visit more than 256 tuples"):
            loads(data)
    set_data = pickle.dumps({key}, 4)
    if ok:
        assert loads(set_data) == {key}
    else:
        with pytest.raises(MigrateError, match="would visit more than 256 tuples"):
            loads(set_data)


@pytest.mark.parametrize("data, ok", [
    (b"\x8a\x40" + b"\xff" * 64 + b".", True),      # LONG1 of 64 bytes: -1
    (b"\x8a\x41" + b"\xff" * 65 + b".", False),
    (b"\x8b\x40\0\0\0" + b"\x01" * 64 + b".", True),  # LONG4
    (b"\x8b\x41\0\0\0" + b"\x01" * 65 + b".", False),
    (b"L" + b"9" * 192 + b"L\n.", True),             # a text LONG of 192 digits (3 x 64)
    (b"L" + b"9" * 193 + b"\n.", False),
    (b"I-" + b"9" * 191 + b"\n.", True),
    (b"I" + b"9" * 193 + b"\n.", False),
])
def test_integers_are_bounded_at_64_bytes(data, ok):
    """``_MAX_INT_BYTES`` = 64: LONG1/LONG4 of 64 bytes, text integers of 3 x 64 digits."""
    if ok:
        got = loads(data)
        assert got == pickle.loads(data) and type(got) is int
    else:
        with pytest.raises(MigrateError, match="an integer of"):
            loads(data)


@pytest.mark.parametrize("value", [-2**70, -1, -2**63, 2**63, False, True, [False, 0, True, 1], "", b"",
                                   -0.0, 1e300])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_scalars_read_as_cpython_reads_them(value, protocol):
    data = pickle.dumps(value, protocol)
    got, want = loads(data), pickle.loads(data)
    assert got == want and type(got) is type(want) and repr(got) == repr(want)


@pytest.mark.parametrize("data", [
    b"S'abc'\n.", b'S"a\\x41\\n"\n.', b"S''\n.", b"(S'x'\nS'y'\nt.", b"I00\n.", b"I01\n.",
    b"(I01\nI00\nl.", b"(dp0\nS'k'\np1\nI3\nsg1\n.", b"\x80\x04N\x95\x00\x00\x00\x00\x00\x00\x00\x00.",
    b"\x80\x04Nr\x05\x00\x00\x00\x94h\x01.",  # MEMOIZE after a far index: the memo's length, 1
    b"\x80\x04Nr\x05\x00\x00\x00\x94h\x05.",
    b"\x80\x05N.",
])
def test_protocol_0_to_5_opcodes_read_as_cpython_reads_them(data):
    assert loads(data) == pickle.loads(data, encoding="latin1")


@pytest.mark.parametrize("data, error, match", [
    (b"S'\n.", MigrateError, "corrupt STRING"),
    (b"S'abc\"\n.", MigrateError, "corrupt STRING"),
    (b"Sxabcx\n.", MigrateError, "corrupt STRING"),
    (b"S\n.", MigrateError, "corrupt STRING"),
    (b"0.", MigrateError, "stack underflow"),
    (b"(0.", MigrateError, "stack underflow"),
    (b"N(\x85.", MigrateError, "stack underflow"),
    (b"\x94.", MigrateError, "memo of nothing"),
    (b"(\x94.", MigrateError, "memo of nothing"),
    (b"h\x00.", MigrateError, "never stored"),
    (b"Nq\x00h\x01.", MigrateError, "memo entry 1 was never stored"),
    (b"\x80\x06N.", MigrateError, "protocol above 5"),
    (b"N1.", MigrateError, "no MARK"),
    (b"c__builtin__\nbytearray\n.", UnsafePickleError, "returns builtins.bytearray itself"),
    (b"K\x01K\x02\x93.", UnsafePickleError, "non-text"),
    (P4 + sunicode("numpy") + b"K\x02\x93.", UnsafePickleError, "non-text"),
    (P4 + b"K\x02" + sunicode("dtype") + b"\x93.", UnsafePickleError, "non-text"),
    (P4 + b"\x95" + struct.pack("<Q", 3) + b"N.", MigrateError, "a frame of 3 bytes, 2 left"),
    (b"1.", MigrateError, "no MARK"),
    (b"e.", MigrateError, "no MARK"),
    (b"}(K\x01K\x02K\x03u.", MigrateError, "odd SETITEMS"),
    (b"\x80\x04}(K\x01K\x02(\x91K\x03u.", MigrateError, "a dict key of type frozenset"),  # the 2nd key
    (b"\x80\x04" + b"}(K\x01K\x02\x8f(\x90K\x03u.", MigrateError, "a dict key of type set"),
    (b"NK\x01a.", UnsafePickleError, "APPEND on a NoneType"),
    (b"K\x01K\x01a.", UnsafePickleError, "APPEND on a int"),
    (b"(K\x01e.", UnsafePickleError, "APPENDS on a nothing"),
    (P4 + glob4("mxnet.optimizer.optimizer", "SGD") + b"]R.", UnsafePickleError, "not a plain tuple"),
    (P4 + glob4("mxnet.optimizer.optimizer", "SGD") + b")}" + sunicode("a") + b"K\x01s\x92.",
     UnsafePickleError, "not a plain tuple"),
    (P4 + glob4("mxnet.optimizer.optimizer", "SGD") + b"}b.", UnsafePickleError, "modify an allowed function"),
    (P4 + b"]}b.", UnsafePickleError, "BUILD on a list"),
    (P4 + b"N}b.", UnsafePickleError, "BUILD on a NoneType"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_corrupt_streams_are_refused_naming_what(data, error, match):
    with pytest.raises(error, match=match):
        loads(data)


def test_every_prefix_of_a_pickle_is_refused():
    """Each proper prefix of a protocol 0 and a protocol 4 pickle: `MigrateError`, never a hang or
    another exception; the STOP opcode is read, not assumed."""
    value = {"a": [1, 2.5, "x", b"yz", (None, True)], "b": -2**70}
    for protocol in (0, 4):
        data = pickle.dumps(value, protocol)
        for cut in range(len(data)):
            with pytest.raises(MigrateError, match="truncated"):
                loads(data[:cut])
        assert loads(data) == value


def test_the_budget_is_4x_the_file_and_1_mib():
    """``_BUDGET_FACTOR`` x the file's length + ``_BUDGET_SLACK``: the message names the total."""
    data = P4 + b"N" + b"2" * 100_000 + b"."  # DUP: 100,000 stack slots of 8 bytes, charged twice
    with pytest.raises(MigrateError, match=f"more than the {4 * len(data) + (1 << 20)} bytes"):
        loads(data)


@pytest.mark.parametrize("dups, tail, ok", [(87_382, b".xx", True), (87_382, b"0.x", True),
                                            (87_383, b".xx", False)])
def test_the_stack_is_charged_16_bytes_a_slot(dups, tail, ok):
    """Before each opcode the stack is charged ``2 x _SLOT`` (8) bytes a slot once that exceeds what is
    left of the budget (4 x the file's length + 1 MiB). ``N``, ``dups`` DUPs, then STOP (or POP, STOP)
    and bytes after it (never read): 16 x (1 + 87,382) equals 4 x 87,390 (87,388) + 2**20 exactly, and
    is not more: nothing is charged, and the POP's smaller stack is not charged either."""
    data = P4 + b"N" + b"2" * dups + tail
    if ok:
        assert loads(data) is None
    else:
        with pytest.raises(MigrateError, match=f"more than the {4 * len(data) + (1 << 20)} bytes"):
            loads(data)


def test_a_dict_key_and_a_records_arguments_are_levels_too():
    """The 100-level bound counts what holds a value: a dict above its keys, a record (a framework
    object read as its attributes) above its argument tuple."""
    assert loads(pickle.dumps({_tuple_levels(99): 1}, 4)) == {_tuple_levels(99): 1}
    with pytest.raises(MigrateError, match="nested more than 100 deep"):
        loads(pickle.dumps({_tuple_levels(100): 1}, 4))

    def record(levels):  # SGD(<a tuple `levels` deep>): the record 1, its args 2, the tuple from 3
        return loads(P4 + glob4("mxnet.optimizer.optimizer", "SGD") + pickle.dumps(_tuple_levels(levels), 2)[2:-1]
                     + b"\x85R.")
    assert record(98).args == (_tuple_levels(98),)
    with pytest.raises(MigrateError, match="nested more than 100 deep"):
        record(99)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_arrays_inside_tuples_are_arrays(protocol):
    """A tuple holding an array beside other values (Gluon's multi-precision states are such tuples)
    holds the array, not the reader's pending object."""
    value = {"t": (np.arange(3.0), 1, "z"), "u": (np.ones(2, np.float16),), "e": ()}
    got = loads(pickle.dumps(value, protocol))
    assert type(got["t"]) is tuple and type(got["t"][0]) is np.ndarray and got["t"][1:] == (1, "z")
    np.testing.assert_array_equal(got["t"][0], np.arange(3.0))
    assert type(got["u"][0]) is np.ndarray and got["u"][0].dtype == np.float16 and got["e"] == ()


def test_containers_are_charged_twice_their_growth():
    """A list is charged twice what it grows by (old and new table at a resize): 60,000 items (60 KB
    of file, about 0.5 MB of list, 1.1 MB charged) fit the budget of 4 x 60 KB + 1 MiB; 300,000 do
    not. 10,000 far memo entries (50 KB of file) are read: each is charged its own growth, not the
    memo's size."""
    assert loads(pickle.dumps([None] * 60_000, 4)) == [None] * 60_000
    with pytest.raises(MigrateError, match="size allows"):
        loads(pickle.dumps([None] * 300_000, 4))
    far = b"".join(b"r" + struct.pack("<I", (1 << 20) + i) for i in range(10_000))
    assert loads(P4 + b"N" + far + b"0j" + struct.pack("<I", (1 << 20) + 9_999) + b".") is None



# The reader's charges, transcribed from the module docstring of gradxform/migrate/_pickle.py ("every
# Python object by its sys.getsizeof, every element added to a container by the container's growth",
# "each opcode by a stack slot"): sizes come from CPython objects of the same layout, never from the
# reader's accounting. Protocol 2, no FRAME.
def _growth(container, add_one, n):
    """2 x what ``container`` grows by (old and new table at a resize) over ``n`` single additions."""
    total = 0
    for i in range(n):
        before = sys.getsizeof(container)
        add_one(container, i)
        total += 2 * max(0, sys.getsizeof(container) - before)
    return total


def _appends(n):
    return _growth([], lambda c, i: c.append(None), n)


class _SlotsOf4:  # the layout of the reader's pending object (a dtype or array between REDUCE and BUILD)
    __slots__ = ("recipe", "args", "value", "built")


# A filler that charges far more than its bytes allow: a 64 KiB text (memo 0) and its argument tuple
# (memo 1), then 12 x bytearray(text, 'latin-1') (REDUCE, popped): each charged its bytes (the
# recipe's take) and the bytearray object. 12 x 128 KiB charged for 12 x 6 bytes of file.
_TEXT = "a" * 65_536
_FILLER = (b"cbuiltins\nbytearray\nq\x000" + b"X" + struct.pack("<I", len(_TEXT)) + _TEXT.encode()
           + b"\x8c\x07latin-1\x86q\x010" + b"h\x00h\x01R0" * 12)
_FILLER_CHARGE = (sys.getsizeof(_TEXT) + sys.getsizeof("latin-1") + sys.getsizeof((_TEXT, "latin-1"))
                  + 12 * (len(_TEXT) + sys.getsizeof(bytearray(_TEXT.encode("latin-1")))))


def _budget_case(case, n=16):
    """(stream, its charge, the result): the filler, a case's prefix, then ``]`` + ``n`` x an item
    (each making one object, then APPEND) + STOP. Charged: the filler, the memo's growth (a list while
    its indices come in order), the outer list, each item and the list's growth, and the final walk's
    bookkeeping entry (``_ENTRY``, 64 bytes) for each container, record or pending object in the result."""
    far = range(3, n + 3)  # past the in-order memo (0, 1): the far memo (a dict)
    item, memo, prefix, extra, result = {
        # empty lists: each its size
        "lists": (b"]a", 2, b"", sys.getsizeof([]), [[]] * n),
        # one-item tuples: each its size (1 level deep: no depth entry)
        "flat tuples": (b"N\x85a", 2, b"", sys.getsizeof((None,)), [(None,)] * n),
        # numpy.dtype('f8'): the pending object + _ARRAY_HEADER (112); the global and its argument
        # tuple are made once (memo 2, 3) and fetched (BINGET) for each
        "dtypes": (b"h\x02h\x03Ra", 4, b"cnumpy\ndtype\nq\x020X\x02\x00\x00\x00f8\x85q\x030",
                   sys.getsizeof(_SlotsOf4()) + 112, [np.dtype("f8")] * n),
    }.get(case, (None, 2, b"", 0, None))
    charge = _FILLER_CHARGE + _appends(memo) + sys.getsizeof([]) + 64
    if case == "far memo":  # n BINPUTs of the empty list: the dict's growth + 32 (the key) each
        stream = b"]" + b"".join(b"r" + struct.pack("<I", k) for k in far)
        charge += _growth({}, lambda c, i: c.__setitem__(far[i], None), n) + 32 * n
        result = []
    else:
        stream = prefix + b"]" + item * n
        charge += {"dtypes": sys.getsizeof("f8") + sys.getsizeof(("f8",))}.get(case, 0)
        charge += n * (extra + 64) + _appends(n)
    return b"\x80\x02" + _FILLER + stream + b".", charge, result


def _on_the_budget(stream, charge):
    """``stream`` padded after STOP (bytes never read, which count in the file's length) so that the
    budget, 4 x the length + 2**20, is at least ``charge`` and less than ``charge`` + 4."""
    pad = -(-(charge - (1 << 20)) // 4) - len(stream)
    assert pad >= 1, pad  # the stream charges more than its own bytes allow
    data = stream + b"x" * pad
    assert charge <= 4 * len(data) + (1 << 20) < charge + 4
    return data


def _read_on_the_budget_and_not_4_bytes_less(data, check):
    check(loads(data))
    with pytest.raises(MigrateError, match=f"more than the {4 * (len(data) - 1) + (1 << 20)} bytes"):
        loads(data[:-1])  # one padding byte less: the budget 4 bytes smaller


@pytest.mark.parametrize("case", ["lists", "flat tuples", "far memo", "dtypes"])
def test_charges_land_exactly_on_the_budget(case):
    """Each stream is padded so that the budget is at least the charge transcribed above and less than
    it + 4: read; one padding byte less: refused. So each charge is exact to the budget's granularity:
    a constant a few bytes off for 16 objects (a bookkeeping entry, an array header, a far memo entry,
    a flat tuple's depth entry, an item added, an append that does not resize) reads or refuses."""
    stream, charge, expected = _budget_case(case)
    _read_on_the_budget_and_not_4_bytes_less(_on_the_budget(stream, charge),
                                             lambda got: (got == expected) or pytest.fail(f"{got!r}"))



def test_a_records_charge_is_its_object_and_both_its_dicts():
    """A framework record (16 mxnet ``SGD`` of no arguments) is charged its object, its ``__dict__`` and
    its attribute dict, and a walk entry (64); their common argument ``()`` is walked once (64). CPython
    3.11 sizes a fresh instance's ``__dict__`` by its class's shared keys, which shrink with each
    instance made until a floor (measured: 296, 288, ..., 88 bytes over the first 27), so the sizes are
    measured on records read after 48 others, all equal; then the exact budget reads and 4 bytes less
    refuses."""
    n = 16
    stream = b"\x80\x02" + _FILLER + b"cmxnet.optimizer\nSGD\nq\x020]" + b"h\x02)Ra" * n + b"."
    for _ in range(4):
        got = loads(stream + b"x" * (1 << 20))
    assert len(got) == n and all(r.cls_path == "mxnet.optimizer.optimizer.SGD" and r.args == () for r in got)
    sizes = {sys.getsizeof(r) + sys.getsizeof(r.__dict__) + sys.getsizeof(r.attrs) for r in got}
    assert len(sizes) == 1, sizes
    charge = (_FILLER_CHARGE + _appends(3) + sys.getsizeof([]) + 64 + n * (sizes.pop() + 64) + _appends(n)
              + 64)
    _read_on_the_budget_and_not_4_bytes_less(_on_the_budget(stream, charge),
                                             lambda got: len(got) == n or pytest.fail(f"{got!r}"))
