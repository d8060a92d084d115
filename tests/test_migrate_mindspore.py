"""gradxform.migrate.from_mindspore_checkpoint against checkpoints written by MindSpore 2.10.0.

Fixtures (tests/fixtures/mindspore/<case>/, written with the real MindSpore by
tools/mindspore_migration_fixtures.py): the optimizer saved with
``ms.save_checkpoint(opt, 'opt.ckpt')`` after k=5 steps, the gradients of all n=10 steps
and the parameters after each. We load the checkpoint, feed the recorded gradients of
steps k..n-1 and compare with MindSpore's parameters after every step: float32 rtol 1e-5
(atol 1e-6 for entries near zero). Cases: Adam (and a learning-rate list), AdamWeightDecay,
Momentum, RMSProp (centered), Adagrad, FTRL, AdaMax, Adadelta, Rprop, ASGD and AdaFactor
(relative step; fixed lr without a first moment); the later five also hold MindSpore's state
after step n-1 (``final_<tag>``), which the state we reach must equal.
"""
import binascii
import glob
import io
import json
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform.migrate import MigrateError, from_mindspore_checkpoint, read_mindspore_checkpoint
from gradxform.migrate._mindspore import _checkpoint_class

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mindspore")
CASES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "*", "opt.ckpt")))
# MindSpore class -> gradxform registry name
NAMES = {"Adam": "mindspore.adam", "AdamWeightDecay": "mindspore.adam_weight_decay", "FTRL": "mindspore.ftrl",
         "RMSProp": "mindspore.rmsprop", "Adagrad": "mindspore.adagrad", "Momentum": "mindspore.momentum",
         "AdaMax": "mindspore.adamax", "Adadelta": "mindspore.adadelta", "Rprop": "mindspore.rprop",
         "ASGD": "mindspore.asgd", "AdaFactor": "mindspore.adafactor"}
# arguments MindSpore takes as tuples, which the fixture's JSON holds as lists
TUPLES = ("etas", "step_sizes", "eps")


def test_fixtures_present():
    assert len(CASES) >= 13 and {"adamax", "adadelta", "rprop", "asgd", "adafactor"} <= set(CASES), CASES


def load(case):
    z = np.load(os.path.join(ROOT, case, "trajectory.npz"))
    return z, json.loads(str(z["meta"]))


def make_tx(meta, **override):
    kw = {k: tuple(v) if k in TUPLES and isinstance(v, list) else v for k, v in meta["kwargs"].items()}
    return gx.create(NAMES[meta["optimizer"]], **dict(kw, **override))


def ckpt(case):
    return os.path.join(ROOT, case, "opt.ckpt")


def params_at(z, meta, t):
    return {n: jnp.asarray(z[f"p_{t}_{n}"]) for n in meta["names"]}


def assert_params(z, meta, t, params):
    for n in meta["names"]:
        np.testing.assert_allclose(np.asarray(params[n]), z[f"p_{t}_{n}"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {t}, {n}")


def resume(z, meta, source, check=True):
    """The params and state after steps k..n-1 from ``source`` (a checkpoint), checking
    the params against MindSpore's after every step unless ``check`` is False."""
    k, tx = meta["k"], make_tx(meta)
    params = params_at(z, meta, k - 1)
    state = from_mindspore_checkpoint(source, params, tx)
    for t in range(k, meta["n"]):
        g = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}
        updates, state = tx.update(g, state, params)
        params = gx.apply_updates(params, updates)
        if check:
            assert_params(z, meta, t, params)
    return params, state


def final_state(z, meta):
    """What the reader makes of MindSpore's state after step n-1 (``final_<tag>``), or None."""
    final = {k[len("final_"):]: z[k] for k in z.files if k.startswith("final_")}
    if not final:
        return None
    final.update({n: z[f"p_{meta['n'] - 1}_{n}"] for n in meta["names"]})
    return from_mindspore_checkpoint(io.BytesIO(_encode(final)), params_at(z, meta, meta["n"] - 1), make_tx(meta))


def states_close(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.shape(x) == np.shape(y) and np.allclose(np.asarray(x, np.float64),
                                                                                   np.asarray(y, np.float64),
                                                                                   rtol=1e-5, atol=1e-6)
                                      for x, y in zip(la, lb))


@pytest.mark.parametrize("case", CASES)
def test_resume_matches_mindspore(case):
    z, meta = load(case)
    _, state = resume(z, meta, ckpt(case))
    want = final_state(z, meta)  # every slot, those that never reach the weights (ASGD's ax) too
    assert want is None or states_close(state, want), case


@pytest.mark.parametrize("case", CASES)
def test_reader_bit_exact(case):
    """The protobuf reader gives what ms.load_checkpoint gave (stored as ckpt_<tag>)."""
    z, meta = load(case)
    got = read_mindspore_checkpoint(ckpt(case))
    want = {k[len("ckpt_"):]: z[k] for k in z.files if k.startswith("ckpt_")}
    assert set(got) == set(want) == set(meta["ckpt_entries"])
    for tag, a in want.items():
        assert got[tag].dtype == a.dtype and got[tag].shape == a.shape, tag
        assert got[tag].tobytes() == a.tobytes(), tag
    assert int(got["global_step"][0]) == meta["k"]


def test_fresh_state_would_not_match():
    z, meta = load("adam")
    tx = make_tx(meta)
    params = params_at(z, meta, meta["k"] - 1)
    state = tx.init(params)
    for t in range(meta["k"], meta["n"]):
        g = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}
        u, state = tx.update(g, state, params)
        params = gx.apply_updates(params, u)
    with pytest.raises(AssertionError):
        assert_params(z, meta, meta["n"] - 1, params)


def test_nested_params_and_names():
    """'dense1/weight' finds 'dense1.weight' by default; names= maps anything else."""
    z, meta = load("momentum")
    k = meta["k"]
    nested = {layer: {kind: jnp.asarray(z[f"p_{k - 1}_{layer}.{kind}"]) for kind in ("weight", "bias")}
              for layer in ("dense1", "dense2")}
    tx = make_tx(meta)
    s1 = from_mindspore_checkpoint(ckpt("momentum"), nested, tx)
    renamed = {"a": nested["dense1"], "b": nested["dense2"]}
    names = {f"{a}/{kind}": f"{layer}.{kind}" for a, layer in (("a", "dense1"), ("b", "dense2"))
             for kind in ("weight", "bias")}
    s2 = from_mindspore_checkpoint(ckpt("momentum"), renamed, tx, names=names)
    leaves1 = [np.asarray(x) for x in jax.tree.leaves(s1)]
    leaves2 = [np.asarray(x) for x in jax.tree.leaves(s2)]
    assert len(leaves1) == len(leaves2) and all(np.array_equal(a, b) for a, b in zip(leaves1, leaves2))
    for tag in ("moments.dense1.weight", "moments.dense2.bias"):  # the momentum buffers are in there
        assert any(np.array_equal(x, z[f"ckpt_{tag}"]) for x in leaves1), tag
    with pytest.raises(MigrateError, match="'zz' is not a parameter name"):
        from_mindspore_checkpoint(ckpt("momentum"), renamed, tx, names={"zz": "dense1.weight"})


def test_missing_extra_and_shapes_named():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    tx = make_tx(meta)
    with pytest.raises(MigrateError, match=r"'moment1.dense2.bias', a .* state for a parameter that is not in params"):
        from_mindspore_checkpoint(ckpt("adam"), {n: params[n] for n in meta["names"][:3]}, make_tx(meta))
    more = dict(params, **{"dense3.weight": jnp.zeros((2, 2), jnp.float32)})
    with pytest.raises(MigrateError, match=r"no 'moment1.dense3.weight' for parameter 'dense3.weight'"):
        from_mindspore_checkpoint(ckpt("adam"), more, make_tx(meta))
    other = dict(params, **{"dense2.weight": jnp.zeros((3, 3), jnp.float32)})
    with pytest.raises(MigrateError, match=r"shape \(2, 3\) but parameter 'dense2.weight' has shape \(3, 3\)"):
        from_mindspore_checkpoint(ckpt("adam"), other, tx)


def test_wrong_optimizer_and_hyperparameters():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    with pytest.raises(MigrateError, match="MomentsState"):
        from_mindspore_checkpoint(ckpt("adam"), params, gx.create("mindspore.momentum", learning_rate=0.01,
                                                                    momentum=0.9))
    with pytest.warns(UserWarning, match="beta1_power"):
        from_mindspore_checkpoint(ckpt("adam"), params, make_tx(meta, beta1=0.8))
    with pytest.warns(UserWarning, match=r"learning_rate: tx 0.02 vs file 0.01"):
        from_mindspore_checkpoint(ckpt("adam"), params, make_tx(meta, learning_rate=0.02))


def test_truncated_and_corrupt(tmp_path):
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    data = open(ckpt("adam"), "rb").read()
    for cut in (len(data) - 3, len(data) // 2 + 1, 7):
        f = tmp_path / f"cut{cut}.ckpt"
        f.write_bytes(data[:cut])
        with pytest.raises(MigrateError):
            from_mindspore_checkpoint(f, params, make_tx(meta))
    f = tmp_path / "empty.ckpt"
    f.write_bytes(b"")
    with pytest.raises(MigrateError, match="no tensors"):
        from_mindspore_checkpoint(f, params, make_tx(meta))


def test_crc_trailer(tmp_path):
    z, meta = load("momentum")
    data = open(ckpt("momentum"), "rb").read()
    good = data + b"crc_num" + binascii.crc32(data).to_bytes(10, "big")
    (tmp_path / "good.ckpt").write_bytes(good)
    assert set(read_mindspore_checkpoint(tmp_path / "good.ckpt")) == set(meta["ckpt_entries"])
    bad = bytearray(good)
    bad[-40] ^= 1
    (tmp_path / "bad.ckpt").write_bytes(bytes(bad))
    with pytest.raises(MigrateError, match="CRC"):
        read_mindspore_checkpoint(tmp_path / "bad.ckpt")


def test_split_tensor_is_joined(tmp_path):
    """Tensors over 512 MiB are written as consecutive slices with one tag and the full dims."""
    cls = _checkpoint_class()
    msg = cls()
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    for part in np.array_split(w, 2):
        v = msg.value.add(tag="moments.w")
        v.tensor.dims.extend([4, 3])
        v.tensor.tensor_type = "Float32"
        v.tensor.tensor_content = part.tobytes()
    (tmp_path / "split.ckpt").write_bytes(msg.SerializeToString())
    np.testing.assert_array_equal(read_mindspore_checkpoint(tmp_path / "split.ckpt")["moments.w"], w)


def test_fuzz_checkpoint_refused_or_sane(tmp_path, request):
    """Mutated MindSpore checkpoints (bit flips, cuts, insertions) through the whole reader: MigrateError,
    or a state with finite floats and counts in [0, 2**31 - 2] (a flipped bit inside a tensor's data is a
    different but valid file when it carries no CRC trailer). Never another exception, never memory beyond
    4x the file + 8 MiB. ``--slow`` runs 20x more mutations."""
    import tracemalloc  # noqa: PLC0415

    from test_migrate_pickle import _mutations, _state_is_sane  # noqa: PLC0415

    def sane(state):  # group_slot is an index (-1: no group), not a count
        return _state_is_sane(jax.tree_util.tree_map_with_path(
            lambda p, x: jnp.zeros((), jnp.int32) if "group_slot" in jax.tree_util.keystr(p) else x, state))

    n = 30 * (20 if request.config.getoption("--slow", default=False) else 1)  # per file: 9 kinds of state
    rng = np.random.default_rng(7)
    outcomes = {"refused": 0, "loaded": 0}
    for case in ("adam", "momentum", "ftrl", "adamax", "adadelta", "rprop", "asgd", "adafactor",
                 "adafactor_lr_nobeta1"):
        z, meta = load(case)
        params, tx = params_at(z, meta, 4), make_tx(meta)
        data = open(ckpt(case), "rb").read()
        budget = 4 * len(data) + (8 << 20)
        for i, mutated in enumerate(_mutations(data, rng, n)):
            path = tmp_path / f"{case}_{i}.ckpt"
            path.write_bytes(mutated)
            tracemalloc.start()
            try:
                state = from_mindspore_checkpoint(path, params, tx)
            except MigrateError:
                outcomes["refused"] += 1
            else:
                outcomes["loaded"] += 1
                assert sane(state), (case, i)
            finally:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            assert peak < budget, (case, i, peak)
    assert outcomes["refused"] > 0, outcomes


READER = os.path.join(ROOT, "reader")  # tools/mindspore_reader_fixtures.py, MindSpore 2.10.0


def reader_expected():
    z = np.load(os.path.join(READER, "expected.npz"))
    return z, json.loads(str(z["meta"]))


@pytest.mark.parametrize("name", ["values.ckpt", "values_crc.ckpt"])
def test_reader_reads_what_mindspore_loads_every_dtype_rank_and_string(name):
    """ms.save_checkpoint of one tensor per dtype the reader supports (float16/32/64, int8-64, uint8-64,
    bool) at ranks 0, 1, 2 and 5, append_dict strings (ASCII, non-ASCII, empty: MindSpore writes dims [0]
    and UTF-32 text) and Python scalars, without and with the crc_num trailer: the tags in MindSpore's
    order, and each value as ms.load_checkpoint returned it (dtype, shape, every byte; strings equal)."""
    z, meta = reader_expected()
    got = read_mindspore_checkpoint(os.path.join(READER, name))
    assert list(got) == [e["tag"] for e in meta["entries"]]
    for e in meta["entries"]:
        v = got[e["tag"]]
        if e["kind"] == "str":
            assert isinstance(v, str) and v == e["value"], e
        else:
            want = z["a_" + e["tag"]]
            assert isinstance(v, np.ndarray) and v.dtype == want.dtype and v.shape == want.shape, e
            assert v.tobytes() == want.tobytes(), e


def test_reader_refuses_what_mindspore_cannot_load_or_numpy_cannot_hold():
    """A checkpoint of no tensors with a CRC trailer (MindSpore writes exactly the 17 trailer bytes; its
    loader refuses it: 'The loaded parameter dict is empty ...') is 'no tensors', not an unreadable
    file; a BFloat16 tensor (MindSpore loads it; numpy has no bfloat16) is refused naming its type."""
    _, meta = reader_expected()
    assert meta["empty_crc_error"].startswith("The loaded parameter dict is empty")
    path = os.path.join(READER, "empty_crc.ckpt")
    assert os.path.getsize(path) == 17
    with pytest.raises(MigrateError, match="holds no tensors"):
        read_mindspore_checkpoint(path)
    assert meta["bfloat16"]["dtype"] == "BFloat16"
    with pytest.raises(MigrateError, match="'bf' has tensor type 'BFloat16', which is not supported"):
        read_mindspore_checkpoint(os.path.join(READER, "bfloat16.ckpt"))


# Protobuf written by hand (the wire format, https://protobuf.dev/programming-guides/encoding/) for
# files MindSpore never writes: the schema is mindspore/train/checkpoint.proto (Checkpoint.value = 1;
# Value.tag = 1, .tensor = 2, .maptensor = 3; TensorProto.dims = 1, .tensor_type = 2, .tensor_content = 3;
# MapTensorProto.tensor = 1).
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64: a negative number is its 10-byte two's complement
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:  # a length-delimited field
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _tensor(dims, ttype: str, content: bytes) -> bytes:
    return b"".join(_varint(1 << 3) + _varint(d) for d in dims) + _ld(2, ttype.encode()) + _ld(3, content)


def _entry(tag: str, body: bytes, field: int = 2) -> bytes:  # one Checkpoint.value
    return _ld(1, _ld(1, tag.encode()) + _ld(field, body))


def _read_bytes(data: bytes):
    return read_mindspore_checkpoint(io.BytesIO(data))


# hand_<case>.ckpt (tools/mindspore_reader_fixtures.py): files MindSpore never writes; what MindSpore 2.10's
# ms.load_checkpoint made of each is meta["hand"][case]. Read where MindSpore reads the same array;
# refused where it refuses (or crashes); refused where it reads what is not there (slices disagreeing: it
# takes the last slice's dims and type for the joined bytes) or loads a tag that names nothing.
HAND_REFUSED = {
    "dims_negative": r"'w' has dims \(2, -1\); not an array shape",
    "dims33": "'w' has 33 dims; not an array shape",
    "empty_tag": "an entry's tag is '', not a parameter name",
    "slices_dims": "slices of 'w' disagree on dims or type",
    "slices_type": "slices of 'w' disagree on dims or type",
    "maptensor_unknown_field": "entry 'm' is a MapTensor",  # a field MapTensorProto lacks: kept as unknown
    "maptensor_corrupt": "not a readable MindSpore checkpoint",  # its field 1 holds 3 of 5 bytes
}


@pytest.mark.parametrize("case", ["dims0", "dims3x0", "dims32", *HAND_REFUSED])
def test_handwritten_files_against_mindspore(case):
    _, meta = reader_expected()
    ms = meta["hand"][case]
    path = os.path.join(READER, f"hand_{case}.ckpt")
    if case in HAND_REFUSED:
        assert "error" in ms or case in ("empty_tag", "slices_dims", "slices_type"), ms
        with pytest.raises(MigrateError, match=HAND_REFUSED[case]):
            read_mindspore_checkpoint(path)
        return
    got = read_mindspore_checkpoint(path)
    assert list(got) == list(ms["loaded"])
    for tag, want in ms["loaded"].items():
        assert str(got[tag].dtype) == want["dtype"] and list(got[tag].shape) == want["shape"], tag
        assert got[tag].tobytes().hex() == want["hex"], tag


def test_the_budget_is_800_bytes_an_entry_and_twice_its_data():
    """Each entry is charged 800 bytes (``_ENTRY_BYTES``: its Python objects) and twice its data against
    4 x the file's length + 2**20: 1,600 scalar Float32 entries (27 bytes each in the file) charge
    1,600 x (800 + 2 x 4); one entry's tag is lengthened until the budget is at least that and less
    than it + 4: read; a tag one character shorter (the budget 4 bytes smaller): refused."""
    n, f32 = 1_600, np.float32(0.25).tobytes()
    charge = n * (800 + 2 * len(f32))

    rest = b"".join(_entry(f"e{i:05d}", _tensor([], "Float32", f32)) for i in range(1, n))

    def file(pad):
        return _entry("e00000" + "x" * pad, _tensor([], "Float32", f32)) + rest

    pad = 0
    while 4 * len(file(pad)) + (1 << 20) < charge:
        pad += 1 + max(0, (charge - 4 * len(file(pad)) - (1 << 20)) // 4 - 8)  # close in, then by one
    data = file(pad)
    assert charge <= 4 * len(data) + (1 << 20) < charge + 4
    got = _read_bytes(data)
    assert len(got) == n and np.array_equal(np.stack(list(got.values())), np.full(n, 0.25, np.float32))
    short = file(pad - 1)
    with pytest.raises(MigrateError, match=f"more than the {4 * len(short) + (1 << 20)} bytes"):
        _read_bytes(short)


# mindspore/train/serialization.py lines 87-89 (_tensor_to_np_type), read backwards
_MS_TYPE = {np.dtype(np_type): name for name, np_type in [
    ("Int8", np.int8), ("UInt8", np.uint8), ("Int16", np.int16), ("UInt16", np.uint16), ("Int32", np.int32),
    ("UInt32", np.uint32), ("Int64", np.int64), ("UInt64", np.uint64), ("Float16", np.float16),
    ("Float32", np.float32), ("Float64", np.float64), ("Bool", np.bool_)]}


def _encode(arrays: dict) -> bytes:
    """A checkpoint of ``arrays`` as MindSpore writes one (dims = the shape, [] for a scalar)."""
    return b"".join(_entry(t, _tensor(a.shape, _MS_TYPE[a.dtype], a.tobytes())) for t, a in arrays.items())


def test_the_weights_are_optional_and_checked_when_present():
    """``save_checkpoint(opt)`` stores the weights beside the state; a checkpoint of the state alone
    (the Adam fixture's entries, as ms.load_checkpoint gave them, less the four weights) gives the same
    state; a weight of another shape than its parameter is refused naming it."""
    z, meta = load("adam")
    params, tx = params_at(z, meta, 4), make_tx(meta)
    entries = {tag: z["ckpt_" + tag] for tag in meta["ckpt_entries"]}
    full = from_mindspore_checkpoint(ckpt("adam"), params, tx)
    state_only = from_mindspore_checkpoint(
        io.BytesIO(_encode({t: a for t, a in entries.items() if t not in meta["names"]})), params, tx)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(state_only)))
    other = dict(entries, **{"dense1.weight": np.zeros((2, 2), np.float32)})
    with pytest.raises(MigrateError, match=r"the checkpoint's weight 'dense1.weight' has shape \(2, 2\) but "
                                           r"parameter 'dense1.weight' has shape \(3, 4\)"):
        from_mindspore_checkpoint(io.BytesIO(_encode(other)), params, tx)


def test_no_supported_state_names_the_prefixes_found():
    """A checkpoint of weights only (values.ckpt) has no state prefix: 'none'; one whose prefixes make
    no optimizer's set (Rprop's prev without its step_size) names them; both list what is read.
    MindSpore AdaFactor (adafactor.ckpt, written by MindSpore for the reader tests: afactor_step,
    exp_avg.<p>, exp_avg_sq_row_<p>, ...) is read as AdaFactor: into AdaFactor's state, and for
    another tx the message says what the file holds."""
    _, meta = reader_expected()
    tx = gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9)
    supported = (r"supported: Momentum, SGD, Adam, LazyAdam, AdamOffload, AdamWeightDecay, Lamb, FTRL, Adagrad, "
                 r"ProximalAdagrad, RMSProp, AdaMax, Adadelta, Rprop, ASGD, AdaFactor\.$")
    with pytest.raises(MigrateError, match=r"state prefixes found: none\); " + supported):
        from_mindspore_checkpoint(os.path.join(READER, "values.ckpt"), {"t.float32.v": jnp.zeros(3)}, tx)
    half = _encode({"global_step": np.array([1], np.int32), "prev.w": np.ones(3, np.float32)})
    with pytest.raises(MigrateError, match=r"state prefixes found: \['prev'\]\); " + supported):
        from_mindspore_checkpoint(io.BytesIO(half), {"w": jnp.zeros(3)}, gx.create("mindspore.rprop"))
    assert "afactor_step" in meta["adafactor_tags"] and "exp_avg_sq_row_weight" in meta["adafactor_tags"]
    params = {"weight": jnp.zeros((3, 4)), "bias": jnp.zeros(3)}
    with pytest.raises(MigrateError, match=r"the checkpoint holds AdaFactor state"):
        from_mindspore_checkpoint(os.path.join(READER, "adafactor.ckpt"), params, tx)
    state = from_mindspore_checkpoint(os.path.join(READER, "adafactor.ckpt"), params, gx.create("mindspore.adafactor"))
    got = read_mindspore_checkpoint(os.path.join(READER, "adafactor.ckpt"))
    af = state[-1]
    assert np.array_equal(af.exp_avg_sq_row["weight"], got["exp_avg_sq_row_weight"]) and af.exp_avg_sq_row["bias"] == ()
    assert np.array_equal(af.exp_avg_sq["bias"], got["exp_avg_sq_bias"]) and af.exp_avg_sq["weight"] == ()


def test_missing_state_names_both_names():
    """The message for a missing state entry gives the MindSpore name, noting when it is the
    gradxform name itself."""
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    more = dict(params, a={"weight": jnp.zeros((2, 2), jnp.float32)})
    with pytest.raises(MigrateError, match=r"no 'moment1.a/weight' for parameter 'a/weight' \(MindSpore name\)\.$"):
        from_mindspore_checkpoint(ckpt("adam"), more, make_tx(meta))
    with pytest.raises(MigrateError, match=r"no 'moment1.dense9.weight' for parameter 'a/weight' "
                                           r"\(MindSpore name 'dense9.weight'\)\.$"):
        from_mindspore_checkpoint(ckpt("adam"), more, make_tx(meta), names={"a/weight": "dense9.weight"})


def test_the_beta_power_warning_points_at_the_call():
    """Like every migration warning, the beta-power mismatch is attributed to the caller's line."""
    z, meta = load("adam")
    with pytest.warns(UserWarning, match="beta1_power") as caught:
        from_mindspore_checkpoint(ckpt("adam"), params_at(z, meta, 4), make_tx(meta, beta1=0.8))
    assert [w.filename for w in caught if "beta1_power" in str(w.message)] == [__file__]


def test_a_tag_that_is_the_gradxform_name_wins_over_the_dotted_reading():
    """'a/b' reads as 'a.b' only when no tag is 'a/b' itself: here the weight 'a/b' and its state
    'moments.a/b' are in the file, beside an unrelated weight 'c.a.b' (which ends with '.a.b')."""
    w, m = np.arange(3, dtype=np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    data = _encode({"global_step": np.array([5], np.int32), "learning_rate": np.array(0.1, np.float32),
                    "momentum": np.array(0.9, np.float32), "a/b": w, "c.a.b": np.zeros(2, np.float32),
                    "moments.a/b": m})
    state = from_mindspore_checkpoint(io.BytesIO(data), {"a": {"b": jnp.asarray(w)}},
                                      gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9))
    assert sum(np.array_equal(np.asarray(x), m) for x in jax.tree.leaves(state)) == 1


def test_a_state_entry_of_another_shape_is_named_without_the_weights():
    """Without the weights beside it (which are checked too), a state entry of another shape than its
    parameter is refused naming the entry; so is one that is text."""
    z, meta = load("adam")
    params, tx = params_at(z, meta, 4), make_tx(meta)
    entries = {t: z["ckpt_" + t] for t in meta["ckpt_entries"] if t not in meta["names"]}
    other = dict(params, **{"dense2.weight": jnp.zeros((3, 3), jnp.float32)})
    with pytest.raises(MigrateError, match=r"'moment1.dense2.weight' has shape \(2, 3\) but parameter "
                                           r"'dense2.weight' has shape \(3, 3\)"):
        from_mindspore_checkpoint(io.BytesIO(_encode(entries)), other, tx)
    text = _encode({t: a for t, a in entries.items() if t != "moment2.dense1.bias"}) + _entry(
        "moment2.dense1.bias", _tensor([0], "str", "abc".encode("utf-32-le")))
    with pytest.raises(MigrateError, match=r"'moment2.dense1.bias' has shape \(\) but parameter 'dense1.bias' has "
                                           r"shape \(3,\)"):
        from_mindspore_checkpoint(io.BytesIO(text), params, tx)


def test_a_beta_power_is_one_number():
    """MindSpore keeps ``beta1_power`` as one float32 (mindspore/nn/optim/adam.py line 718: shape ();
    line 1197, AdamOffload: (1,)). Beside a state that has none (AdamWeightDecay, MindSpore's default
    beta1=0.9), a ``beta1_power`` in the file is still checked against tx's beta1 after
    ``global_step`` (5) steps: one number of either shape is read, and a warning names it when it is
    not 0.9**5; two numbers are refused, as they are beside Adam's state."""
    z, meta = load("adamweightdecay")
    params, tx = params_at(z, meta, 4), make_tx(meta)
    entries = {t: z["ckpt_" + t] for t in meta["ckpt_entries"]}

    def with_power(p):
        return io.BytesIO(_encode(dict(entries, beta1_power=np.asarray(p, np.float32))))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_mindspore_checkpoint(with_power([0.9 ** 5]), params, tx)
    with pytest.warns(UserWarning, match=r"beta1_power is 0.5 in the checkpoint but tx's beta1=0.9 gives "
                                         r"0\.5904\d* after 5 steps"):
        from_mindspore_checkpoint(with_power(0.5), params, tx)
    with pytest.raises(MigrateError, match="cannot reshape array of size 2"):
        from_mindspore_checkpoint(with_power([0.9 ** 5, 0.5]), params, tx)


# -- AdaMax, Adadelta, Rprop, ASGD, AdaFactor (issue 24's optimizers with CPU kernels) --

def _entries(z, meta):
    return {t: np.array(z["ckpt_" + t]) for t in meta["ckpt_entries"] if "ckpt_" + t in z.files}


def _state_groups(meta):
    """The checkpoint's state tags by prefix ('moment1.', 'mu_', 'exp_avg_sq_row_', ...); a tag of
    no parameter (beta1_power, afactor_step) is a group of its own; the hyperparameters are left out."""
    groups: dict = {}
    for t in meta["ckpt_entries"]:
        if t in meta["names"] or t in ("global_step", "learning_rate", "momentum"):  # not state
            continue
        owner = next((n for n in meta["names"] if t.endswith(n) and t != n), None)
        groups.setdefault(t[:-len(owner)] if owner else t, []).append(t)
    return groups


@pytest.mark.parametrize("case", CASES)
def test_every_state_entry_is_read(case):
    """Each group of state entries ('accum_update.<p>', 'mu_<p>', 'beta1_power', ...) zeroed in the
    checkpoint is refused, or the resumed run leaves MindSpore's weights (or, where the fixture has
    it, MindSpore's final state): no entry is read and then dropped, or left at its initial value."""
    z, meta = load(case)
    entries = _entries(z, meta)
    want_params, want_state = params_at(z, meta, meta["n"] - 1), final_state(z, meta)
    tried = 0
    for prefix, tags in sorted(_state_groups(meta).items()):
        if not any(np.any(entries[t] != 0) for t in tags):
            continue  # zero already (AdaFactor's placeholders, its shared 'Parameter$1' without beta1)
        tried += 1
        zeroed = dict(entries, **{t: np.zeros_like(entries[t]) for t in tags})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a zero beta power is warned about
            try:
                params, state = resume(z, meta, io.BytesIO(_encode(zeroed)), check=False)
            except MigrateError:
                continue
        same = all(np.allclose(params[n], want_params[n], rtol=1e-5, atol=1e-6) for n in meta["names"])
        assert not (same and (want_state is None or states_close(state, want_state))), (case, prefix)
    assert tried, case


@pytest.mark.parametrize("case, tag, value, match", [
    ("adamax", "moment2.dense1.weight", np.zeros((4, 3), np.float32),
     r"'moment2.dense1.weight' has shape \(4, 3\) but parameter 'dense1.weight' has shape \(3, 4\)"),
    ("adamax", "beta1_power", np.array([0.5, 0.5], np.float32), "cannot reshape array of size 2"),
    ("adamax", "beta1_power", np.array([1.5], np.float32), "RunningPowerState.beta1_power"),
    ("adadelta", "accum_update.dense2.bias", np.zeros(3, np.float32),
     r"'accum_update.dense2.bias' has shape \(3,\) but parameter 'dense2.bias' has shape \(2,\)"),
    ("adadelta", "accum.dense2.bias", -np.ones(2, np.float32), "AdadeltaState.accum must be in"),
    ("rprop", "step_size.dense1.bias", np.zeros((3, 1), np.float32), r"'step_size.dense1.bias' has shape \(3, 1\)"),
    ("rprop", "step_size.dense1.bias", -np.ones(3, np.float32), "RpropState.step_size must be in"),
    ("asgd", "mu_dense1.weight", np.ones(1, np.float32),
     (r"'mu_dense1.weight' has shape \(1,\) but parameter 'dense1.weight' has shape \(3, 4\), so "
      r"'mu_dense1.weight' needs \(\)")),
    ("asgd", "eta_dense2.bias", np.ones(2, np.float32), r"'eta_dense2.bias' has shape \(2,\)"),
    ("asgd", "mu_dense1.bias", np.array(1.5, np.float32), "AveragedState.mu must be in"),
    ("asgd", "ax_.dense1.weight", np.zeros(12, np.float32), r"'ax_.dense1.weight' has shape \(12,\)"),
    ("adafactor", "exp_avg_sq_row_dense1.weight", np.zeros(4, np.float32),
     (r"'exp_avg_sq_row_dense1.weight' has shape \(4,\) but parameter 'dense1.weight' has shape \(3, 4\), so "
      r"'exp_avg_sq_row_dense1.weight' needs \(3,\)")),
    ("adafactor", "exp_avg_sq_col_dense2.weight", np.zeros(2, np.float32), r"needs \(3,\)"),
    ("adafactor", "exp_avg_sq_dense1.bias", np.zeros(1, np.float32), r"needs \(3,\)"),
    ("adafactor", "exp_avg.dense1.weight", np.zeros(3, np.float32), r"'exp_avg.dense1.weight' has shape \(3,\)"),
    ("adafactor", "exp_avg_sq_row_dense1.bias", np.array([0.5], np.float32),
     (r"'exp_avg_sq_row_dense1.bias' is .* but parameter 'dense1.bias' \(shape \(3,\)\) does not use that "
      r"slot, where MindSpore keeps a \(1,\) zero")),
    ("adafactor", "exp_avg_sq_dense2.weight", np.zeros(2, np.float32), "does not use that slot"),
    ("adafactor", "exp_avg_sq_col_dense2.bias", np.array(0.0, np.float32), "does not use that slot"),
    ("adafactor_lr_nobeta1", "exp_avg_sq_col_dense1.bias", np.array([np.nan], np.float32), "does not use that slot"),
    ("adafactor", "afactor_step", np.array([4.0], np.float32), r"'afactor_step' is 4.0 but global_step is 5"),
])
def test_a_slot_that_does_not_fit_is_refused(case, tag, value, match):
    """A state entry of another shape than MindSpore gives it (a parameter's, one number for ASGD's
    mu and eta, a row or a column for AdaFactor's factors), a value no run reaches, a nonzero where
    AdaFactor keeps its (1,) zero placeholder, or an afactor_step that is not global_step."""
    z, meta = load(case)
    entries = _entries(z, meta)
    assert tag in entries
    with pytest.raises(MigrateError, match=match):
        from_mindspore_checkpoint(io.BytesIO(_encode(dict(entries, **{tag: value}))), params_at(z, meta, 4),
                                  make_tx(meta))


def test_adafactor_without_its_step_is_refused():
    z, meta = load("adafactor")
    entries = {t: a for t, a in _entries(z, meta).items() if t != "afactor_step"}
    with pytest.raises(MigrateError, match=r"has no 'afactor_step' \(AdaFactor's step count"):
        from_mindspore_checkpoint(io.BytesIO(_encode(entries)), params_at(z, meta, 4), make_tx(meta))


@pytest.mark.parametrize("case, name, kw, holds", [
    ("adamax", "mindspore.adam", {"learning_rate": 0.01}, "AdaMax"),
    ("adam", "mindspore.adamax", {"learning_rate": 0.01}, "Adam / LazyAdam"),
    ("adadelta", "mindspore.adagrad", {"learning_rate": 0.05}, "Adadelta"),
    ("adagrad", "mindspore.adadelta", {"learning_rate": 0.05}, "Adagrad / ProximalAdagrad"),
    ("rprop", "mindspore.momentum", {"learning_rate": 0.1, "momentum": 0.9}, "Rprop"),
    ("asgd", "mindspore.sgd", {"learning_rate": 0.1}, "ASGD"),
    ("adafactor", "mindspore.adamax", {"learning_rate": 0.01}, "AdaFactor"),
])
def test_each_kind_is_told_apart(case, name, kw, holds):
    """AdaMax (moment1, moment2 and one beta1_power) is not read as Adam, nor Adam (two beta powers) as
    AdaMax; Adadelta (accum beside accum_update) not as Adagrad, nor Adagrad as Adadelta; each tx of
    another optimizer is told which one the file holds."""
    z, meta = load(case)
    with pytest.raises(MigrateError, match=f"the checkpoint holds {holds}"):
        from_mindspore_checkpoint(ckpt(case), params_at(z, meta, 4), gx.create(name, **kw))


def test_adafactor_first_moment_follows_beta1():
    """MindSpore keeps exp_avg.<p> only with beta1 > 0: a file with them for a tx with beta1=0, and one
    without them for a tx with beta1 > 0, are refused saying so."""
    z, meta = load("adafactor")
    with pytest.raises(MigrateError, match=r"has exp_avg.<parameter> entries, a first moment \(the run's beta1 > 0\), "
                                           r"where tx keeps none; build tx with the run's hyperparameters"):
        from_mindspore_checkpoint(ckpt("adafactor"), params_at(z, meta, 4), make_tx(meta, beta1=0.0))
    z, meta = load("adafactor_lr_nobeta1")
    assert "Parameter$1" in meta["ckpt_entries"]  # MindSpore's one shared zero in place of exp_avg
    with pytest.raises(MigrateError, match=r"has no exp_avg.<parameter> entries, which tx keeps: a first moment "
                                           r"\(tx's beta1 > 0; a run with beta1=0 keeps none\)"):
        from_mindspore_checkpoint(ckpt("adafactor_lr_nobeta1"), params_at(z, meta, 4), make_tx(meta, beta1=0.9))


def test_asgd_mu_and_eta_are_checked_against_tx():
    """ASGD's per-parameter mu (1 / max(1, t - t0)) and eta (lr / (1 + lambd lr t)^alpha) are restored as
    saved; when tx's t0, lambd or alpha give other values after global_step steps, a warning says so."""
    z, meta = load("asgd")
    params = params_at(z, meta, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = from_mindspore_checkpoint(ckpt("asgd"), params, make_tx(meta))
    avg = state[-1]
    np.testing.assert_array_equal(avg.mu, [z[f"ckpt_mu_{n}"] for n in sorted(meta["names"])])
    np.testing.assert_array_equal(avg.eta, [z[f"ckpt_eta_{n}"] for n in sorted(meta["names"])])
    with pytest.warns(UserWarning, match=r"mu is 0.3333333 in the checkpoint but tx's t0=1 gives 0.25 after 5"):
        from_mindspore_checkpoint(ckpt("asgd"), params, make_tx(meta, t0=1.0))
    with pytest.warns(UserWarning, match=r"eta is 0.04993762 in the checkpoint but tx's lambd=0.1, alpha=0.5"):
        from_mindspore_checkpoint(ckpt("asgd"), params, make_tx(meta, lambd=0.1))


@pytest.mark.parametrize("case", CASES)
def test_convert_run_keeps_every_state_entry_out_of_the_weights(case):
    """The optimizer checkpoint holds the network's weights too: `convert_run` reads them as the
    parameters and every state entry as state, whatever its prefix's separator ('moment1.<p>',
    ASGD's 'mu_<p>' / 'eta_<p>', AdaFactor's 'exp_avg_sq_row_<p>'): nothing is left as a buffer."""
    from gradxform.migrate import convert_run
    z, meta = load(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hyperparameter mismatch notes (a list learning rate)
        run = convert_run("mindspore", ckpt(case), ckpt(case), make_tx(meta))
    assert sorted(run["params"]) == sorted(meta["names"])
    # AdaFactor with beta1=0 saves one shared unnamed zero ('Parameter$1', adafactor.py's exp_avg when
    # unused): MindSpore's auto-name, which a network's own unnamed parameter could also carry
    left = {b: a for b, a in run["buffers"].items() if b.startswith("Parameter$") and not np.any(a)}
    assert sorted(run["buffers"]) == sorted(left)


@pytest.mark.parametrize("shape", [(5,), (4, 5), (3, 4, 5), (3, 3, 4, 5)])
def test_adafactor_entry_shapes_are_the_states_for_every_rank(shape):
    """The file's shape of each AdaFactor entry (MindSpore: row ``shape[:-1]``, column
    ``shape[:-2] + shape[-1:]``, the full moment of a vector) is the shape gradxform's state keeps,
    or None where the state keeps ``()`` and the file a (1,) placeholder: the fixtures' Dense
    weights are 2-D, a convolution's kernel is 4-D."""
    from gradxform.migrate._mindspore import _factored_col, _factored_row, _unfactored
    state = gx.create("mindspore.adafactor").init({"w": jnp.zeros(shape)})[-1]
    for fn, field in ((_factored_row, "exp_avg_sq_row"), (_factored_col, "exp_avg_sq_col"),
                      (_unfactored, "exp_avg_sq")):
        kept = getattr(state, field)["w"]
        assert fn(shape) == (None if isinstance(kept, tuple) else kept.shape), (field, shape)


def test_an_adafactor_step_of_two_numbers_is_refused():
    z, meta = load("adafactor")
    entries = dict(_entries(z, meta), afactor_step=np.array([5.0, 7.0], np.float32))
    with pytest.raises(MigrateError, match=r"a malformed 'afactor_step'"):
        from_mindspore_checkpoint(io.BytesIO(_encode(entries)), params_at(z, meta, 4), make_tx(meta))


def test_asgd_checks_eta_only_where_one_fixed_rate_made_it():
    """eta depends on the learning rate: it is checked against tx's lambd and alpha only for a
    file with one fixed rate and one eta for all parameters. A rate list in the file, or parameters
    with etas of their own (a group's rate), are read without a check; mu's check follows t0
    wherever t - t0 falls (t0=4 after 5 steps: 1 / max(1, 1) = 1)."""
    z, meta = load("asgd")
    params = params_at(z, meta, 4)
    base = _entries(z, meta)
    first = f"eta_{sorted(meta['names'])[0]}"
    for entries in (dict(base, learning_rate=np.full((10,), 0.05, np.float32)),
                    dict(base, **{first: base[first] * np.float32(1.5)})):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            from_mindspore_checkpoint(io.BytesIO(_encode(entries)), params, make_tx(meta))
    with pytest.warns(UserWarning, match=r"mu is 0.3333333 in the checkpoint but tx's t0=4 gives 1 after 5"):
        from_mindspore_checkpoint(ckpt("asgd"), params, make_tx(meta, t0=4.0))


def test_an_asgd_checkpoint_saved_before_any_update_reads_without_a_warning():
    """Before its first update MindSpore's ASGD holds mu = 1 and eta = 0 (asgd.py: not the formula's
    lr): nothing to check against tx at global_step 0."""
    z, meta = load("asgd")
    entries = {t: (np.ones_like(a) if t.startswith("mu_") else np.zeros_like(a) if t.startswith("eta_") else a)
               for t, a in _entries(z, meta).items()}
    entries["global_step"] = np.zeros((1,), np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = from_mindspore_checkpoint(io.BytesIO(_encode(entries)), params_at(z, meta, 4), make_tx(meta))
    assert not np.asarray(state[-1].eta).any()
