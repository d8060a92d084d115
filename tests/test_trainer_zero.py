"""The Trainer's sharded optimizer state (``update_on_kvstore=True``, ZeRO-1;
`gradxform.trainer._zero`) on 4 fake CPU devices (conftest), 8 in a subprocess.

Tolerance: 4 float32 eps of each leaf's largest magnitude, over 20 steps.
Every element of a sharded step goes through the arithmetic of the
unsharded fused step, and a reduction (LAMB, LARS, a global-norm clip, the
guards' finite check) sees the whole buffer in the unsharded order. But the
two are different XLA programs, and where a rule has a product next to a sum
(MXNet Adam's ``rescale * g + wd * w`` and its ``w - lr * d``, Nadam's
per-leaf schedule applied per element) XLA:CPU may contract it into an FMA
in one and not the other: one rounding apart, not a sum in another order.
Measured over 20 steps: at most 0.92 eps closed loop (the parameters feed
the next gradient) and 1.005 eps open loop (the same gradients fed to both);
SGD with momentum, LAMB (MindSpore, Paddle), LARS and Paddle's global-norm
clip came out bit for bit in that run, which the test keeps asserting
for them (`BIT_FOR_BIT`).
"""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform import paddle as P
from gradxform._state_paths import find_states
from gradxform.pieces.internal import StepState
from gradxform.trainer import Trainer
from test_trainer import DEV1, assert_equal

STEPS = 20


def init_params(dtype=jnp.float32):
    """Sizes that 4 devices do not divide (35, 5, 15, 3): every buffer is padded."""
    k1, k2 = jax.random.split(jax.random.key(1))
    return {"dense": {"kernel": (jax.random.normal(k1, (7, 5)) * 0.5).astype(dtype), "bias": jnp.zeros(5, dtype)},
            "out": {"kernel": (jax.random.normal(k2, (5, 3)) * 0.5).astype(dtype), "bias": jnp.zeros(3, dtype)}}


def loss_fn(p, batch):
    x, y = batch
    h = jnp.tanh(x @ p["dense"]["kernel"].astype(jnp.float32) + p["dense"]["bias"].astype(jnp.float32))
    return jnp.sum((h @ p["out"]["kernel"].astype(jnp.float32) + p["out"]["bias"].astype(jnp.float32) - y) ** 2)


_rng = np.random.RandomState(0)
BATCHES = [(_rng.randn(8, 7).astype(np.float32), _rng.randn(8, 3).astype(np.float32)) for _ in range(STEPS)]
BAD = (np.full((8, 7), np.inf, np.float32), BATCHES[0][1])  # a non-finite gradient: the step is skipped


def lars():
    return gx.create("mindspore.lars", optimizer=gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9),
                     weight_decay=1e-3)


CASES = {
    "sgd_momentum": (("sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}), {}),
    "adam_groups_2bit": (("adam", {"learning_rate": 0.02, "wd": 1e-3, "lr_mult": {"dense/*": 2.0},
                                   "wd_mult": {"*bias": 0.0}, "clip_gradient": 0.5}),
                         {"compression_params": {"type": "2bit", "threshold": 0.05}}),
    "mindspore_lamb": (("mindspore.lamb", {"learning_rate": 0.01, "weight_decay": 0.01}), {}),
    "paddle_lamb": (("paddle.lamb", {"learning_rate": 0.01}), {}),
    "paddle_adamw_global_clip": (("paddle.adamw", {"learning_rate": 0.01,
                                                   "grad_clip": P.ClipGradByGlobalNorm(0.5)}), {}),
    "mindspore_lars": ((lars(), None), {}),
    "adam_loss_scale_skip": (("adam", {"learning_rate": 0.01}), {"loss_scale": "dynamic", "skip_nonfinite": True}),
    "mxnet_nadam": (("nadam", {"learning_rate": 0.01}), {}),
}


def run(opt, kw, **where):
    """20 steps through every path: step, allreduce_grads + update, the compiled step, and one non-finite batch."""
    t = Trainer(init_params(), *opt, **kw, **where)
    compiled = t.compile_step(loss_fn)
    for i, batch in enumerate(BATCHES):
        if i == 7 and kw.get("skip_nonfinite"):
            batch = BAD
        if i % 3 == 0:
            t.step(t.grads(loss_fn, batch), 8)
        elif i % 3 == 1:
            t.update(t.allreduce_grads(t.grads(loss_fn, batch)), 8)
        else:
            compiled(batch, 8)
    return t


def assert_within_eps(a, b, k=4.0):
    """``|a - b| <= k * eps_f32 * max|b|`` per leaf: roundings of single operations, not a sum reordered."""
    def check(x, y):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind != "f" or not x.size:
            np.testing.assert_array_equal(x, y)
            return
        bound = k * np.finfo(np.float32).eps * float(np.max(np.abs(y.astype(np.float32))))
        assert float(np.max(np.abs(x.astype(np.float32) - y.astype(np.float32)))) <= bound
    jax.tree.map(check, a, b)


BIT_FOR_BIT = ("sgd_momentum", "mindspore_lamb", "paddle_lamb", "mindspore_lars")  # as measured: see above


@pytest.mark.parametrize("case", sorted(CASES))
def test_sharded_state_equals_unsharded(case):
    opt, kw = CASES[case]
    sharded = run(opt, kw, update_on_kvstore=True)
    whole = run(opt, kw, fused=True)
    assert sharded._zero is not None and whole._zero is None
    # rules with nothing for XLA to contract differently: the gathered reductions must give identical numbers
    same = assert_equal if case in BIT_FOR_BIT else assert_within_eps
    same((sharded.params, sharded.state), (whole.params, whole.state))
    assert sharded.learning_rate == whole.learning_rate
    if kw.get("skip_nonfinite"):
        # the outer guard skipped the bad step (and so kept the loss scaler's state as it was)
        assert gx.guard_status(sharded.state)[0]["skipped"] == 1
        assert sharded.loss_scale == whole.loss_scale


def test_each_device_holds_a_quarter_of_every_state_buffer():
    t = Trainer(init_params(), "adam", {"learning_rate": 0.01}, update_on_kvstore=True)
    whole = Trainer(init_params(), "adam", {"learning_rate": 0.01}, fused=True)
    lengths = jax.tree.leaves(t._zero.lengths(t._state.layout))
    buffers = [n for n in lengths if n >= 0]
    assert len(buffers) == 2 * len(t._state.layout.groups)  # mu and nu, one buffer per group
    stored = [x for x, n in zip(jax.tree.leaves(t._state.inner), lengths) if n >= 0]
    unsharded = [x for x, n in zip(jax.tree.leaves(whole._state.inner), lengths) if n >= 0]
    for x, full, n in zip(stored, unsharded, buffers):
        shard = x.addressable_shards[0].data
        assert shard.shape == (1, -(-n // 4)), (shard.shape, n)  # ceil(n / 4): the only padding
        assert full.addressable_shards[0].data.shape == (1, n)
        assert {s.device for s in x.addressable_shards} == set(jax.devices())


@pytest.mark.parametrize("case", ["sgd_momentum", "adam_groups_2bit", "mindspore_lamb", "adam_loss_scale_skip"])
def test_one_device_fed_the_same_sums_gives_the_same_numbers(case):
    """The sums (2-bit compressed where asked) of the 4-device sharded Trainer, fed to one device."""
    (opt, kw), one_kw = CASES[case], {k: v for k, v in CASES[case][1].items() if k != "compression_params"}
    sharded = Trainer(init_params(), *opt, **kw, update_on_kvstore=True)
    one = Trainer(init_params(), *opt, **one_kw, devices=DEV1, fused=True)
    for batch in BATCHES:
        summed = sharded.allreduce_grads(sharded.grads(loss_fn, batch))
        sharded.update(summed, 8)
        one.update(jax.tree.map(lambda x: np.asarray(x)[:1], summed), 8)
    assert_within_eps(sharded.params, one.params)
    assert_within_eps(sharded.state, one.state)


def test_float16_master_weights_shard_with_their_parameters():
    opt = ("sgd", {"learning_rate": 0.05, "momentum": 0.9, "multi_precision": True})
    sharded = Trainer(init_params(jnp.float16), *opt, update_on_kvstore=True)
    whole = Trainer(init_params(jnp.float16), *opt, fused=True)
    for t in (sharded, whole):
        for batch in BATCHES[:6]:
            t.step(t.grads(loss_fn, batch), 8)
    assert jax.tree.leaves(sharded.params)[0].dtype == jnp.float16
    assert_equal(sharded.params, whole.params)
    assert_equal(sharded.state, whole.state)


GRADS = [{k: {kk: np.asarray(_rng.randn(*v.shape), np.float32) for kk, v in d.items()}
          for k, d in init_params().items()} for _ in range(6)]
OPT = ("adam", {"learning_rate": 0.02, "wd": 1e-3, "lr_mult": {"out/*": 0.5}})


def saved_after_three_updates(path) -> Trainer:
    """A sharded Trainer that saved its checkpoint to ``path`` after 3 updates, then made 3 more."""
    ref = Trainer(init_params(), *OPT, update_on_kvstore=True)
    for g in GRADS[:3]:
        ref.update(g, 8)
    ref.save_states(path)
    for g in GRADS[3:]:
        ref.update(g, 8)
    return ref


def test_checkpoint_saved_sharded_resumes_on_one_device_and_on_four(tmp_path):
    ref = saved_after_three_updates(tmp_path / "ckpt")
    for where in ({"devices": DEV1}, {"update_on_kvstore": True}, {"fused": False}):
        t = Trainer(init_params(), *OPT, **where)
        t.load_states(tmp_path / "ckpt")
        for g in GRADS[3:]:
            t.update(g, 8)
        assert_equal(t.params, ref.params)
        assert_equal(t.state, ref.state)


_EIGHT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import numpy as np, jax
    sys.path.insert(0, sys.argv[3])
    from test_trainer_zero import GRADS, OPT, init_params
    from gradxform.trainer import Trainer
    assert jax.device_count() == 8
    t = Trainer(init_params(), *OPT, update_on_kvstore=True)
    t.load_states(sys.argv[1])
    for g in GRADS[3:]:
        t.update(g, 8)
    np.savez(sys.argv[2], *[np.asarray(x) for x in jax.tree.leaves((t.params, t.state))])
""")


def test_checkpoint_saved_on_four_sharded_devices_resumes_on_eight(tmp_path):
    ref = saved_after_three_updates(tmp_path / "ckpt")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.path.join(root, "src") + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", _EIGHT, str(tmp_path / "ckpt"), str(tmp_path / "out.npz"),
                    os.path.dirname(os.path.abspath(__file__))], check=True, env=env, timeout=300)
    got = np.load(tmp_path / "out.npz")
    want = jax.tree.leaves((ref.params, ref.state))
    assert len(got.files) == len(want)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"arr_{i}"], np.asarray(w))


def test_sharding_is_asked_for_in_gluons_words_and_refused_where_it_cannot_apply():
    assert Trainer(init_params(), *OPT, shard_optimizer_state=True)._zero is not None
    with pytest.raises(ValueError, match="disagree"):
        Trainer(init_params(), *OPT, update_on_kvstore=False, shard_optimizer_state=True)
    with pytest.raises(ValueError, match="fused=False"):
        Trainer(init_params(), *OPT, update_on_kvstore=True, fused=False)
    with pytest.raises(ValueError, match="update_on_kvstore=True: the sharded state needs flat buffers"):
        Trainer(init_params(), "mindspore.adafactor", {}, update_on_kvstore=True)
    for where in ({"kvstore": None}, {"devices": DEV1}):
        with pytest.warns(UserWarning, match="no kvstore to update on"):
            assert Trainer(init_params(), *OPT, update_on_kvstore=True, **where)._zero is None


def test_stale_gradient_ends_the_sharding_with_gluons_numbers():
    """Gluon's kvstore skips a stale parameter and its per-index count; per-leaf
    counts need the per-leaf layout, so the Trainer gathers the state, warns, and goes on."""
    runs = []
    for kw in ({"update_on_kvstore": True}, {"fused": True}):
        t = Trainer(init_params(), *OPT, **kw)
        t.step(t.grads(loss_fn, BATCHES[0]), 8)
        g = t.grads(loss_fn, BATCHES[1])
        g["out"]["bias"] = None
        if kw.get("update_on_kvstore"):
            with pytest.warns(UserWarning, match=r"'out/bias' is None \(stale\).*whole state") as rec:
                t.step(g, 8, ignore_stale_grad=True)
            # the warning names the line that called step (stacklevel), not the Trainer's code
            assert [w.filename for w in rec if "stale" in str(w.message)] == [__file__]
            assert t._zero is None and not t.fused
        else:
            t.step(g, 8, ignore_stale_grad=True)
        t.step(t.grads(loss_fn, BATCHES[2]), 8)
        runs.append(t)
    assert_within_eps((runs[0].params, runs[0].state), (runs[1].params, runs[1].state))
    (step,) = find_states(runs[0].state, StepState)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [3, 3, 2, 3]  # out/bias skipped one update


def test_hyperparameters_change_on_the_sharded_trainer_as_on_the_whole_one():
    runs = []
    for kw in ({"update_on_kvstore": True}, {"fused": True}):
        t = Trainer(init_params(), *OPT, **kw)
        for i, g in enumerate(GRADS):
            if i == 2:
                t.set_learning_rate(0.005)
            t.update(g, 4 if i % 2 else 8)  # a new batch size sets rescale_grad, as Gluon does
        assert t.learning_rate == pytest.approx(0.005)
        runs.append(t)
    assert_within_eps(runs[0].params, runs[1].params)
    assert_within_eps(runs[0].state, runs[1].state)
    assert len([k for k in runs[0]._programs if k[0] == "update"]) == 1  # one program for every lr and batch size


def test_a_bad_file_leaves_the_sharded_trainer_as_it_was(tmp_path):
    """Truncated, bit-flipped and hostile files: the documented error, nothing loaded, nothing run."""
    t = Trainer(init_params(), *OPT, update_on_kvstore=True)
    t.update(GRADS[0], 8)
    t.save_states(tmp_path / "ckpt")
    t.update(GRADS[1], 8)
    before = (t.params, t.state)
    raw = (tmp_path / "ckpt").read_bytes()
    marker = tmp_path / "ran"
    bad = {"truncated": raw[: len(raw) // 2], "flipped": raw[:200] + bytes([raw[200] ^ 0xFF]) + raw[201:],
           "hostile": b"\x80\x04cposix\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises((gx.checkpoint.CheckpointError, gx.migrate.MigrateError)):
            t.load_states(tmp_path / name)
        assert_equal((t.params, t.state), before)
    assert not marker.exists()
    t.update(GRADS[2], 8)  # and it goes on training


@pytest.mark.parametrize("opt", [("sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}), OPT],
                         ids=["sgd_momentum", "adam"])
def test_checkpoint_with_per_leaf_counts_resumes_in_every_layout(tmp_path, opt):
    """A checkpoint written after a stale gradient holds a step count per leaf
    (out/bias one behind); every layout, sharded included, loads it with
    exactly the saved numbers and goes on. Against the run that saved it
    (per-leaf layout): bit for bit for SGD, within the FMA rounding the module
    docstring measures for Adam; against itself resumed twice: bit for bit."""
    ref = Trainer(init_params(), *opt, fused=False)
    ref.step(ref.grads(loss_fn, BATCHES[0]), 8)
    g = ref.grads(loss_fn, BATCHES[1])
    g["out"]["bias"] = None
    ref.step(g, 8, ignore_stale_grad=True)
    ref.save_states(tmp_path / "ckpt")
    saved = ref.state
    (step,) = find_states(saved, StepState)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [2, 2, 1, 2]
    for g in GRADS[3:]:
        ref.update(g, 8)
    for where in ({"update_on_kvstore": True}, {"fused": True}, {"fused": False}, {"devices": DEV1}):
        runs = []
        for _ in range(2):
            t = Trainer(init_params(), *opt, **where)
            t.load_states(tmp_path / "ckpt")
            assert_equal(t.state, saved)
            for g in GRADS[3:]:
                t.update(g, 8)
            runs.append(t)
        assert_equal((runs[0].params, runs[0].state), (runs[1].params, runs[1].state))
        if opt[0] == "sgd" or not where.get("update_on_kvstore"):
            assert_equal(runs[0].params, ref.params)
            assert_equal(runs[0].state, ref.state)
        else:
            assert_within_eps((runs[0].params, runs[0].state), (ref.params, ref.state))


def test_a_group_of_zero_size_parameters_shards_as_an_empty_buffer():
    """A group whose leaves are all of size 0 (here by their own lr_mult) has a flat buffer of
    length 0: XLA refuses to all-gather a zero-length axis, so it stays whole (empty) on every
    device, in the step and in ``trainer.state``. Fixed with issue 28's mutants of
    ``trainer/_zero.py`` (``n < 0`` -> ``n <= 0``: before, the sharded step did not compile).
    The reference is the unsharded fused Trainer (whose numbers the rest of this file relates)."""
    params = {"w": jnp.arange(5.0), "e": jnp.zeros((0,)), "f": jnp.zeros((0, 3)), "s": jnp.ones(1)}
    opt = ("adam", {"learning_rate": 0.1, "lr_mult": {"e": 2.0, "f": 2.0, "s": 3.0}})
    sharded, whole = Trainer(params, *opt, update_on_kvstore=True), Trainer(params, *opt)
    assert sharded._zero is not None
    # an empty buffer, and a one-element one (its shards: the element and three padding copies)
    assert {0, 1} <= set(jax.tree.leaves(sharded._zero.lengths(sharded._state.layout)))

    def loss(p, batch):
        return jnp.sum((p["w"] * batch) ** 2) + jnp.sum(p["e"]) + jnp.sum(p["f"]) + 2.0 * jnp.sum(p["s"])

    for t in (sharded, whole):
        t.step(t.grads(loss, jnp.ones((8, 5))), 8)
    assert_equal(sharded.params, whole.params)
    assert_equal(sharded.state, whole.state)
    assert jax.tree.map(np.shape, sharded.state) == jax.tree.map(np.shape, whole.state)
    assert float(jnp.abs(sharded.params["w"] - params["w"]).max()) > 0.05  # one Adam step moved it
    assert float(sharded.params["s"][0]) < 0.9  # 1 - 0.1 * 3 * (about 1): the one-element group moved
