"""gradxform.migrate.from_mindspore_checkpoint against checkpoints written by MindSpore 2.10.0.

Fixtures (tests/fixtures/mindspore/<case>/, written with the real MindSpore): the
optimizer saved with ``ms.save_checkpoint(opt, 'opt.ckpt')`` after k=5 steps, the
gradients of all n=10 steps and the parameters after each. We load the checkpoint,
feed the recorded gradients of steps k..n-1 and compare with MindSpore's parameters
after every step: float32 rtol 1e-5 (atol 1e-6 for entries near zero).
"""
import binascii
import glob
import json
import os

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
         "RMSProp": "mindspore.rmsprop", "Adagrad": "mindspore.adagrad", "Momentum": "mindspore.momentum"}


def test_fixtures_present():
    assert len(CASES) >= 6, CASES


def load(case):
    z = np.load(os.path.join(ROOT, case, "trajectory.npz"))
    return z, json.loads(str(z["meta"]))


def make_tx(meta, **override):
    return gx.create(NAMES[meta["optimizer"]], **dict(meta["kwargs"], **override))


def ckpt(case):
    return os.path.join(ROOT, case, "opt.ckpt")


def params_at(z, meta, t):
    return {n: jnp.asarray(z[f"p_{t}_{n}"]) for n in meta["names"]}


def assert_params(z, meta, t, params):
    for n in meta["names"]:
        np.testing.assert_allclose(np.asarray(params[n]), z[f"p_{t}_{n}"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {t}, {n}")


@pytest.mark.parametrize("case", CASES)
def test_resume_matches_mindspore(case):
    z, meta = load(case)
    k, tx = meta["k"], make_tx(meta)
    params = params_at(z, meta, k - 1)
    state = from_mindspore_checkpoint(ckpt(case), params, tx)
    for t in range(k, meta["n"]):
        g = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}
        updates, state = tx.update(g, state, params)
        params = gx.apply_updates(params, updates)
        assert_params(z, meta, t, params)


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

    n = 60 * (20 if request.config.getoption("--slow", default=False) else 1)
    rng = np.random.default_rng(7)
    outcomes = {"refused": 0, "loaded": 0}
    for case in ("adam", "momentum", "ftrl"):
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
