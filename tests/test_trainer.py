"""gradxform.Trainer on 4 fake CPU devices (conftest): the data-parallel paths
equal one device on the same global batch.

Tolerances: 4 devices vs 1 device differ only in the order of the float32
gradient sum, so parameters agree to rtol=1e-5, atol=1e-6 after 3 steps.
Paths that compute the same sums in the same order (compiled vs step by
step vs allreduce_grads + update, resume vs uninterrupted) are compared bit
for bit. Measured: 4 vs 1 device max |diff| 1.2e-7 (step, compiled) and
6.4e-10 (clipped); compiled vs step 0.
"""
import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform
from gradxform import lr_scheduler
from gradxform.checkpoint import CheckpointError
from gradxform.trainer import Compression, Trainer, per_device_grads, replicate, split_batch, unreplicate
from gradxform.trainer._compression import parse_compression

TOL = dict(rtol=1e-5, atol=1e-6)
DEV1 = jax.devices()[:1]


def init_params():
    k1, k2 = jax.random.split(jax.random.key(0))
    return {"dense": {"kernel": jax.random.normal(k1, (3, 4)) * 0.5, "bias": jnp.zeros(4)},
            "out": jax.random.normal(k2, (4,)) * 0.5}


def loss_fn(p, batch):
    """Summed over the examples, as Gluon's ``loss.backward()``."""
    x, y = batch
    h = jnp.tanh(x @ p["dense"]["kernel"] + p["dense"]["bias"])
    return jnp.sum((h @ p["out"] - y) ** 2)


def partial_loss(p, batch):
    """Uses only ``dense``: ``out`` gets no gradient."""
    x, y = batch
    return jnp.sum((jnp.tanh(x @ p["dense"]["kernel"] + p["dense"]["bias"]).sum(-1) - y) ** 2)


_rng = np.random.RandomState(0)
BATCHES = [(_rng.randn(8, 3).astype(np.float32), _rng.randn(8).astype(np.float32)) for _ in range(4)]
SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})


def assert_close(a, b, **tol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol), a, b)


def assert_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def clip(g, max_norm=0.5):
    norm = optax.tree.norm(g)
    return jax.tree.map(lambda x: x * jnp.minimum(1.0, max_norm / norm), g)


def drive(t, mode, steps):
    """``steps`` batches through one of the Trainer's paths: step, allreduce_grads
    + clip + update, or the compiled step."""
    run = t.compile_step(loss_fn) if mode == "compiled" else None
    for batch in BATCHES[:steps]:
        if mode == "step":
            t.step(t.grads(loss_fn, batch), 8)
        elif mode == "clip":
            t.update(jax.vmap(clip)(t.allreduce_grads(t.grads(loss_fn, batch))), 8)
        else:
            run(batch, 8)
    return t


def train(mode, devices=None, steps=3, opt=SGD, **kw):
    return drive(Trainer(init_params(), *opt, devices=devices, **kw), mode, steps)


@pytest.fixture(scope="module")
def one_device():
    return {mode: train(mode, DEV1).params for mode in ("step", "clip")}


def test_one_device_is_the_plain_optimizer_with_rescale_grad():
    t = train("step", DEV1)
    tx = gradxform.create(SGD[0], **SGD[1], rescale_grad=1 / 8)
    p, s = init_params(), tx.init(init_params())

    @jax.jit
    def one(p, s, batch):
        u, s = tx.update(jax.grad(loss_fn)(p, batch), s, p)
        return gradxform.apply_updates(p, u), s

    for batch in BATCHES[:3]:
        p, s = one(p, s, batch)
    assert_close(t.params, p, rtol=1e-6, atol=1e-7)
    assert float(gradxform.get_hyper(t.state, "rescale_grad")) == np.float32(1 / 8)
    # one device runs a plain jit, not a mesh of one (whose device axis copied every donated
    # buffer: `spmap`'s docstring)
    assert all(isinstance(x.sharding, jax.sharding.SingleDeviceSharding) for x in jax.tree.leaves(t._params))


@pytest.mark.parametrize("mode", ["step", "clip"])
def test_four_devices_equal_one_device(one_device, mode):
    t = train(mode)
    assert t.num_devices == 4
    assert_close(t.params, one_device[mode], **TOL)


def test_compiled_step_equals_step_by_step_and_one_device(one_device):
    t = train("compiled")
    assert_equal(t.params, train("step").params)  # same sums in the same order: bit for bit
    assert_close(t.params, one_device["step"], **TOL)
    # the state (momentum, per-leaf counts) advanced the same way
    assert t.state[0].leaf_counts is None and int(t.state[0].count) == 3  # every leaf's count is 3


@pytest.mark.parametrize("fused", [True, False])
def test_compiled_step_returns_total_loss_and_donates(fused):
    t = Trainer(init_params(), *SGD, fused=fused)
    run = t.compile_step(loss_fn)
    before = jax.tree.leaves(t._params)[0]
    expected = loss_fn(t.params, BATCHES[0])
    loss = run(BATCHES[0], 8)
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
    assert before.is_deleted()  # donated: no second copy of the parameters was kept


def test_allreduce_sums_over_devices_and_update_takes_one_copy():
    t = Trainer(init_params(), "sgd", {"learning_rate": 0.1})
    grads = t.grads(loss_fn, BATCHES[0])
    summed = t.allreduce_grads(grads)
    whole = jax.grad(loss_fn)(init_params(), BATCHES[0])
    for k in range(4):  # every device holds the same sum, equal to the whole-batch gradient
        assert_close(jax.tree.map(lambda x: x[k], summed), whole, **TOL)
    t.update(jax.tree.map(lambda x: x[0], summed), 8)  # one copy is accepted too
    expected = jax.tree.map(lambda w, g: w - 0.1 * g / 8, init_params(), whole)
    assert_close(t.params, expected, **TOL)


def test_per_device_grads_helper_matches_pmap():
    grads = per_device_grads(loss_fn, init_params(), BATCHES[1])
    shards = split_batch(BATCHES[1], 4)
    for k in range(4):
        want = jax.grad(loss_fn)(init_params(), jax.tree.map(lambda x: x[k], shards))
        assert_close(jax.tree.map(lambda x: x[k], grads), want, **TOL)
    # devices= two of the four: the batch is split over those two, with the loss of each
    losses, grads = per_device_grads(loss_fn, init_params(), BATCHES[1], devices=jax.devices()[:2],
                                     with_loss=True)
    for k, half in enumerate(split_batch(BATCHES[1], 2)[0]):
        want = jax.value_and_grad(loss_fn)(init_params(), (half, split_batch(BATCHES[1], 2)[1][k]))
        assert_close((losses[k], jax.tree.map(lambda x: x[k], grads)), want, **TOL)
    with pytest.raises(ValueError, match=r"multiple of the 4 devices"):
        split_batch(np.zeros((6, 2)), 4)


def test_plain_optax_transformation_is_normalized_by_batch_size():
    tx = optax.sgd(0.1)
    t = Trainer(init_params(), tx, devices=DEV1)
    assert t.optimizer.tx is tx and t.optimizer == tx and t.num_devices == 1
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    whole = jax.grad(loss_fn)(init_params(), BATCHES[0])
    assert_close(t.params, jax.tree.map(lambda w, g: w - 0.1 * g / 8, init_params(), whole), **TOL)
    with pytest.raises(ValueError, match="optimizer_params must be None"):
        Trainer(init_params(), optax.sgd(0.1), {"learning_rate": 0.1})


def test_stale_gradients():
    t = Trainer(init_params(), *SGD)
    grads = t.grads(partial_loss, BATCHES[0])
    grads["out"] = None
    with pytest.raises(UserWarning, match="Parameter `out`"):
        t.step(grads, 8)
    assert_equal(t.params, init_params())  # the refused step changed nothing
    state0 = t.state
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Gluon's _update skips a stale parameter silently
        t.step(grads, 8, ignore_stale_grad=True)
    assert_equal(t.params["out"], init_params()["out"])
    kernel = np.asarray(t.params["dense"]["kernel"])
    assert not np.allclose(kernel, np.asarray(init_params()["dense"]["kernel"]))
    # flatten order: dense/bias, dense/kernel, out -> only the first two counted
    assert np.asarray(np.asarray(t.state[0].leaf_counts)).tolist() == [1, 1, 0]
    mom_out = lambda s: np.asarray(jax.tree.leaves(s[-1])[-1])  # noqa: E731 (out's momentum)
    assert_equal(mom_out(t.state), mom_out(state0))
    # the same through allreduce_grads + update
    summed = t.allreduce_grads(grads)
    assert summed["out"] is None
    for k in range(4):  # the other parameters are summed all the same
        assert_close(summed["dense"]["kernel"][k], np.asarray(grads["dense"]["kernel"]).sum(0), **TOL)
    with pytest.raises(UserWarning, match="Parameter `out`"):
        t.update(summed, 8)
    t.update(summed, 8, ignore_stale_grad=True)
    assert np.asarray(np.asarray(t.state[0].leaf_counts)).tolist() == [2, 2, 0]


def test_gradient_errors_name_the_parameter():
    t = Trainer(init_params(), *SGD)
    grads = jax.tree.map(lambda p: np.zeros((4,) + p.shape, np.float32), init_params())
    grads["dense"]["kernel"] = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(ValueError, match=r"parameter 'dense/kernel' has shape \(4, 4, 3\); expected "
                                         r"\(4, 3, 4\)"):
        t.step(grads, 8)
    with pytest.raises(ValueError, match="grads must have the parameters' structure"):
        t.step({"dense": grads["dense"]}, 8)
    one_copy = jax.tree.map(lambda p: np.zeros(p.shape, np.float32), init_params())
    with pytest.raises(ValueError, match="one copy per device"):
        t.allreduce_grads(one_copy)  # the all-reduce needs every device's gradient
    with pytest.raises(ValueError, match="one copy per device"):
        t.step(one_copy, 8)  # step all-reduces too
    with pytest.raises(ValueError, match="batch_size"):
        t.update(one_copy, 0)
    assert_equal(t.params, init_params())
    # Gluon's step doc: "Set this to 1 if you normalized loss manually" (any batch_size > 0)
    t.update(one_copy, 1)
    np.testing.assert_allclose(np.asarray(t.params["out"]), np.asarray(init_params()["out"]) * (1 - 0.1 * 0.01),
                               rtol=1e-6)  # zero gradient: only wd acts, w -= lr * wd * w


def test_set_learning_rate_does_not_recompile():
    traces = []
    inner = gradxform.create("sgd", learning_rate=0.1)

    def update(u, s, p=None, **kw):
        traces.append(1)
        return inner.update(u, s, p, **kw)

    t = Trainer(init_params(), optax.GradientTransformationExtraArgs(inner.init, update))
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    t.set_learning_rate(0.0)
    assert t.learning_rate == pytest.approx(0.0)
    frozen = t.params
    t.step(t.grads(loss_fn, BATCHES[1]), 4)  # new lr and new batch size: same program
    assert_equal(t.params, frozen)
    t.set_learning_rate(0.05)
    t.step(t.grads(loss_fn, BATCHES[2]), 8)
    assert len(traces) == 1
    assert t.learning_rate == pytest.approx(0.05)
    run = t.compile_step(loss_fn)  # the fused program: traced once more, then never again
    run(BATCHES[0], 8)
    t.set_learning_rate(0.0)
    frozen = t.params
    run(BATCHES[1], 2)
    assert len(traces) == 2
    assert_equal(t.params, frozen)
    with pytest.raises(ValueError, match="learning_rate"):
        t.set_learning_rate(-1.0)


def test_learning_rate_with_schedule_and_gluon_error():
    sched = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
    t = Trainer(init_params(), "sgd", {"learning_rate": 0.1, "lr_scheduler": sched})
    run = t.compile_step(loss_fn)
    for batch in BATCHES[:3]:
        run(batch, 8)
    assert t.learning_rate == pytest.approx(0.05)  # MXNet: num_update=3 > step=2
    with pytest.raises(UserWarning, match="LRScheduler of the optimizer has already been defined"):
        t.set_learning_rate(0.3)


def _two_bit_reference(grads_per_device, threshold, steps):
    """NumPy transcription of MXNet quantize_2bit / dequantize_2bit with residuals."""
    res = np.zeros_like(grads_per_device[0])
    sums = []
    for _ in range(steps):
        r = res + grads_per_device
        q = np.where(r >= threshold, threshold, np.where(r <= -threshold, -threshold, 0.0)).astype(np.float32)
        res = (r - q).astype(np.float32)
        sums.append(q.sum(0))
    return sums, res


@pytest.mark.parametrize("kind", ["2bit", "1bit"])
def test_compression_round_trip(kind):
    threshold = 0.5 if kind == "2bit" else 0.0
    t = Trainer({"w": jnp.zeros(6)}, "sgd", {"learning_rate": 1.0},
                compression_params={"type": kind, "threshold": threshold})
    g = np.array([[0.3, -0.2, 0.7, -0.9, 0.0, 0.26]] * 2 + [[0.1, 0.3, -0.7, 0.2, 0.05, 0.26]] * 2,
                 np.float32)
    sums = [np.asarray(t.allreduce_grads({"w": g})["w"]) for _ in range(3)]
    res = np.stack([np.asarray(r) for r in t._residual[0]])
    if kind == "2bit":
        want, want_res = _two_bit_reference(g, threshold, 3)
    else:
        want_res, want = np.zeros_like(g), []
        for _ in range(3):
            r = want_res + g
            q = np.where(r > threshold, 1.0, -1.0).astype(np.float32)
            want_res, want = r - q, want + [q.sum(0)]
    for k in range(4):
        assert_close([s[k] for s in sums], want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(res, want_res, rtol=0, atol=1e-6)
    # error feedback: nothing is lost, only delayed
    np.testing.assert_allclose(np.sum(sums, 0)[0] + res.sum(0), 3 * g.sum(0), rtol=1e-5, atol=1e-5)


def test_compressed_step_matches_allreduce_plus_update_and_compiled():
    comp = {"type": "2bit", "threshold": 0.05}
    a, b, c = (Trainer(init_params(), *SGD, compression_params=comp) for _ in range(3))
    run = c.compile_step(loss_fn)
    for batch in BATCHES[:3]:
        a.step(a.grads(loss_fn, batch), 8)
        b.update(b.allreduce_grads(b.grads(loss_fn, batch)), 8)
        run(batch, 8)
    assert_equal(a.params, b.params)
    assert_equal(a.params, c.params)
    assert_equal(a._residual, c._residual)
    with pytest.raises(ValueError, match="'2bit' or '1bit'"):
        Trainer(init_params(), *SGD, compression_params={"type": "3bit"})


@pytest.mark.parametrize("fused", [None, False])
def test_skip_nonfinite_keeps_everything(fused):
    # fused=False: the NaN is in one gradient leaf of three, and no residual may change
    t = Trainer(init_params(), *SGD, skip_nonfinite={"max_consecutive": 2},
                compression_params={"type": "2bit", "threshold": 0.1}, fused=fused)
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    p, s, r = t.params, t.state, [np.asarray(x) for x in t._residual]
    grads = t.grads(loss_fn, BATCHES[1])
    grads["out"] = grads["out"].at[2, 1].set(jnp.nan)  # one device, one element
    t.step(grads, 8)
    assert_equal(t.params, p)
    assert_equal(t.state.inner, s.inner)  # the optimizer's state, step counts included
    assert int(t.state.guard.skipped) == 1  # the guard counts the skipped step
    assert_equal([np.asarray(x) for x in t._residual], r)
    with pytest.raises(gradxform.NonFiniteError, match="2 consecutive steps"):
        t.step(grads, 8)  # the second bad step in a row trips the guard
    assert_equal(t.params, p)


def test_dynamic_loss_scale_skips_overflow_and_halves_the_scale():
    params = jax.tree.map(lambda x: x.astype(jnp.float16), init_params())
    t = Trainer(params, "adam", {"learning_rate": 0.01, "multi_precision": True},
                loss_scale={"init_scale": 2.0 ** 10, "growth_interval": 2})
    assert t.loss_scale == 2.0 ** 10
    big = (BATCHES[0][0] * 1000, BATCHES[0][1] * 1000)  # float16 gradients of loss * 2**10 overflow
    run = t.compile_step(lambda p, b: loss_fn(jax.tree.map(lambda x: x.astype(jnp.float32), p), b))
    before = t.params
    run(big, 8)
    # MXNet AMP's LossScaler: the halving this overflow decides reaches the loss one step late
    assert t.loss_scale == 2.0 ** 10
    assert_equal(t.params, before)
    seen = []
    for _ in range(3):
        run(BATCHES[1], 8)
        seen.append(t.loss_scale)
    assert seen == [2.0 ** 9, 2.0 ** 9, 2.0 ** 10]  # halved, then two clean steps: doubled again
    assert not np.array_equal(np.asarray(t.params["out"]), np.asarray(before["out"]))
    assert t.params["out"].dtype == jnp.float16


@pytest.mark.parametrize("opt,comp", [
    (("adam", {"learning_rate": 0.01, "wd": 0.001,
               "lr_scheduler": lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.01)}),
     {"type": "2bit", "threshold": 0.05}),
    (("sgld", {"learning_rate": 0.01, "seed": 3}), None),  # the PRNG key resumes too
], ids=["adam-schedule-2bit", "sgld"])
def test_resume_is_bit_exact(tmp_path, opt, comp):
    full = Trainer(init_params(), *opt, compression_params=comp)
    for k, batch in enumerate(BATCHES):
        if k == 2:
            full.save_states(tmp_path / "t.states")  # k = 2 of n = 4 steps
            lr_at_save = full.learning_rate
        full.step(full.grads(loss_fn, batch), 8)
    resumed = Trainer(init_params(), *opt, compression_params=comp)  # fresh parameters
    resumed.load_states(tmp_path / "t.states")
    assert resumed.learning_rate == lr_at_save
    for batch in BATCHES[2:]:
        resumed.step(resumed.grads(loss_fn, batch), 8)
    assert_equal(resumed.params, full.params)
    assert_equal(resumed.state, full.state)
    assert_equal(resumed._residual, full._residual)


def test_load_states_refuses_bad_files_and_changes_nothing(tmp_path):
    t = Trainer(init_params(), *SGD)
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    t.save_states(tmp_path / "sgd.states")
    other = Trainer(init_params(), "nag", {"learning_rate": 0.1, "momentum": 0.9})
    other.save_states(tmp_path / "nag.states")
    smaller = Trainer({"w": jnp.zeros(3)}, *SGD)
    smaller.save_states(tmp_path / "small.states")
    data = (tmp_path / "sgd.states").read_bytes()
    (tmp_path / "cut.states").write_bytes(data[: len(data) // 2])

    fresh = Trainer(init_params(), *SGD)
    p, s = fresh.params, fresh.state
    for name, kind, match in [("nag.states", "mismatch", "optimizer"),
                              ("small.states", "mismatch", "tree"),
                              ("cut.states", "truncated", "bytes of the")]:
        with pytest.raises(CheckpointError, match=match) as err:
            fresh.load_states(tmp_path / name)
        assert err.value.kind == kind
        assert_equal(fresh.params, p)
        assert_equal(fresh.state, s)
    fresh.load_states(tmp_path / "sgd.states")
    assert_equal(fresh.params, t.params)


# -- the fused layout (flat buffers) against the per-leaf layout ---------------------------
#
# Per element both layouts run the same float32 operations with the same
# scalars (the optimized HLO of the two update loops is the same expression).
# They are still two compiled programs, and XLA CPU lets LLVM contract
# a*b+c into one FMA (checked: jit(a*b+c) equals the FMA result on 100% of
# elements, numpy's two roundings on 77%); which product it contracts
# depends on the loop it emits. So the layouts agree to within a few float32
# ulps, not always bit for bit: measured at most 1 ulp after 4 steps (2 of
# 29 elements, SGD with momentum after allreduce_grads + clip + update).


def assert_ulps(a, b, max_ulps=4):
    def check(x, y):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind != "f":
            np.testing.assert_array_equal(x, y)
            return
        x, y = x.astype(np.float32), y.astype(np.float32)
        ulps = np.abs(x.view(np.int32).astype(np.int64) - y.view(np.int32).astype(np.int64))
        assert np.all((ulps <= max_ulps) | (x == y)), f"{int(ulps.max())} ulps apart: {x} vs {y}"
    jax.tree.map(check, a, b)


ADAM_GROUPS = ("adam", {"learning_rate": 0.05, "wd": 1e-3, "lr_mult": {"dense/*": 2.0},
                        "wd_mult": {"*bias": 0.0}, "clip_gradient": 0.5,
                        "lr_scheduler": lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.05)})


def _drive(t, mode, steps=4):
    return drive(t, mode, steps)


@pytest.mark.parametrize("mode", ["step", "clip", "compiled"])
@pytest.mark.parametrize("opt,kw", [
    (SGD, {}),
    (ADAM_GROUPS, {"compression_params": {"type": "2bit", "threshold": 0.05}}),
    (ADAM_GROUPS, {"loss_scale": "dynamic", "skip_nonfinite": True}),
])
def test_fused_layout_is_bit_identical_to_per_leaf(mode, opt, kw):
    flat = _drive(Trainer(init_params(), *opt, fused=True, **kw), mode)
    leafy = _drive(Trainer(init_params(), *opt, fused=False, **kw), mode)
    assert flat.fused and not leafy.fused
    assert isinstance(flat._params, gradxform.fused.FlatTree)
    assert len(flat._params.buffers) == len(flat._params.layout.groups)
    assert_ulps(flat.params, leafy.params)
    assert jax.tree.structure(flat.state) == jax.tree.structure(leafy.state)  # per leaf on the outside
    assert_ulps(flat.state, leafy.state)
    assert flat.learning_rate == leafy.learning_rate


def test_fused_is_the_default_where_exact_and_refused_where_not():
    assert Trainer(init_params(), *SGD).fused
    assert not Trainer(init_params(), optax.adam(0.01)).fused  # optax's pieces are not declared
    assert not Trainer({"w": jnp.ones(3)}, *SGD).fused  # one leaf: nothing to fuse
    with pytest.raises(ValueError, match=r"fused=True.*optax.*not declared elementwise"):
        Trainer(init_params(), optax.adam(0.01), fused=True)
    with pytest.raises(TypeError, match="fused=..."):
        Trainer(init_params(), *SGD, fused="yes")


def test_stale_gradient_moves_to_per_leaf_layout_without_changing_numbers():
    def run(fused):
        t = Trainer(init_params(), *ADAM_GROUPS, fused=fused,
                    compression_params={"type": "2bit", "threshold": 0.05})
        t.step(t.grads(loss_fn, BATCHES[0]), 8)
        g = t.grads(partial_loss, (BATCHES[1][0], BATCHES[1][1]))
        g["out"] = None
        t.step(g, 8, ignore_stale_grad=True)
        t.step(t.grads(loss_fn, BATCHES[2]), 8)
        return t

    flat, leafy = run(True), run(False)
    assert not flat.fused  # counts now differ between leaves of one group
    assert_ulps(flat.params, leafy.params)
    assert_ulps(flat.state, leafy.state)
    assert_ulps(flat._residual, leafy._residual)


@pytest.mark.parametrize("save_fused,load_fused", [(True, False), (False, True), (True, True)])
def test_checkpoints_resume_across_layouts(tmp_path, save_fused, load_fused):
    kw = {"compression_params": {"type": "2bit", "threshold": 0.05}}
    ref = _drive(Trainer(init_params(), *ADAM_GROUPS, fused=False, **kw), "step", steps=4)
    first = _drive(Trainer(init_params(), *ADAM_GROUPS, fused=save_fused, **kw), "step", steps=2)
    first.save_states(tmp_path / "ckpt")
    second = Trainer(init_params(), *ADAM_GROUPS, fused=load_fused, **kw)
    second.load_states(tmp_path / "ckpt")
    assert second.fused == load_fused
    for batch in BATCHES[2:4]:
        second.step(second.grads(loss_fn, batch), 8)
    assert_ulps(second.params, ref.params)
    assert_ulps(second.state, ref.state)
    assert_ulps(second._leaf_form()[2], ref._residual)


def test_fused_load_regroups_by_the_loaded_counts(tmp_path):
    # a per-leaf run with a stale step leaves different counts inside what was one group
    t = Trainer(init_params(), *SGD, fused=False)
    g = t.grads(partial_loss, BATCHES[0])
    g["out"] = None
    t.step(g, 8, ignore_stale_grad=True)
    t.save_states(tmp_path / "ckpt")
    resumed = Trainer(init_params(), *SGD, fused=True)
    assert len(resumed._params.buffers) == 1
    resumed.load_states(tmp_path / "ckpt")
    assert resumed.fused and len(resumed._params.buffers) == 2  # 'out' (count 0) apart
    for batch in BATCHES[1:3]:
        t.step(t.grads(loss_fn, batch), 8)
        resumed.step(resumed.grads(loss_fn, batch), 8)
    assert_ulps(resumed.params, t.params)
    assert_ulps(resumed.state, t.state)


def test_fused_default_skips_reordered_sums_and_handles_master_weights(tmp_path):
    # LAMB's per-leaf norms are segment sums (another order) on flat buffers: per leaf unless asked for
    lamb = ("mindspore.lamb", {"learning_rate": 0.01})
    assert not Trainer(init_params(), *lamb).fused
    assert Trainer(init_params(), *lamb, fused=True).fused
    # bfloat16 parameters with float32 master weights: the master buffer of the
    # float32 group is empty, and params, state and checkpoints still come out per leaf
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), init_params())
    half["out"] = half["out"].astype(jnp.float32)
    opt = ("adam", {"learning_rate": 0.05, "multi_precision": True})
    flat, leafy = Trainer(half, *opt), Trainer(half, *opt, fused=False)
    assert flat.fused
    for batch in BATCHES[:2]:
        for t in (flat, leafy):
            t.step(t.grads(loss_fn, batch), 8)
    assert_ulps(flat.params, leafy.params)
    assert_ulps(flat.state, leafy.state)
    flat.save_states(tmp_path / "ckpt")
    leafy.load_states(tmp_path / "ckpt")
    assert_equal(leafy.params, flat.params)


# -- arrays handed out survive later (donating) steps ----------------------------------------

ADAM_MULTS = ("adam", {"learning_rate": 0.05, "wd": 1e-3, "lr_mult": {"dense/*": 2.0},
                       "wd_mult": {"*bias": 0.0}})


def _snapshot(tree):
    return jax.tree.map(lambda x: np.array(x, copy=True), tree)


@pytest.mark.parametrize("devices", [DEV1, None], ids=["1dev", "4dev"])
@pytest.mark.parametrize("fused", [True, False])
def test_params_and_state_handed_out_survive_later_steps(devices, fused):
    # fused_max_leaf_size=4: 'dense/kernel' (12 elements) is a buffer of its own, whose
    # per-leaf view is the buffer reshaped; the others are packed
    kw = {"compression_params": {"type": "2bit", "threshold": 0.05}, "fused_max_leaf_size": 4}
    t = Trainer(init_params(), *ADAM_MULTS, fused=fused, devices=devices, **kw)
    assert t.fused == fused
    run = t.compile_step(loss_fn)
    held = []  # (reference, its values when taken)

    def keep():
        for tree in (t.params, t.state):
            held.append((tree, _snapshot(tree)))

    keep()
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    keep()
    run(BATCHES[1], 8)
    keep()
    t.update(jax.tree.map(lambda x: x[0], t.allreduce_grads(t.grads(loss_fn, BATCHES[2]))), 8)
    keep()
    t.set_learning_rate(0.01)  # donates the state too
    keep()
    run(BATCHES[3], 8)
    for tree, values in held:
        assert_equal(tree, values)  # raised "Array has been deleted" before
    # the steps did happen: each kept params tree differs from the next one
    # (set_learning_rate, between the 4th and the 5th, changes no parameter)
    params = [tree for tree, _ in held[::2]]
    params = params[:4] + [t.params]
    for a, b in zip(params, params[1:]):
        assert not np.array_equal(np.asarray(a["out"]), np.asarray(b["out"]))
    # and the Trainer that kept handing out references trains as one that did not
    ref = Trainer(init_params(), *ADAM_MULTS, fused=fused, devices=devices, **kw)
    ref_run = ref.compile_step(loss_fn)
    ref.step(ref.grads(loss_fn, BATCHES[0]), 8)
    ref_run(BATCHES[1], 8)
    ref.update(jax.tree.map(lambda x: x[0], ref.allreduce_grads(ref.grads(loss_fn, BATCHES[2]))), 8)
    ref.set_learning_rate(0.01)
    ref_run(BATCHES[3], 8)
    assert_equal(t.params, ref.params)
    assert_equal(t.state, ref.state)


@pytest.mark.parametrize("fused", [True, False])
def test_handed_out_arrays_are_copies_and_steps_still_donate(fused):
    t = Trainer(init_params(), *SGD, fused=fused, devices=DEV1, fused_max_leaf_size=4)
    run = t.compile_step(loss_fn)
    held = (t.params, t.state)
    # the parameters and the momentum buffers (scalar hyperparameters the step
    # rewrites are not all donated)
    stored = [x for x in jax.tree.leaves((t._params, t._state)) if np.ndim(x) >= 1]
    pointers = {x.unsafe_buffer_pointer() for x in stored}
    assert not pointers & {x.unsafe_buffer_pointer() for x in jax.tree.leaves(held)}
    run(BATCHES[0], 8)
    assert len(stored) >= 2 and all(x.is_deleted() for x in stored)  # donated: no second copy kept
    assert not any(x.is_deleted() for x in jax.tree.leaves(held))


@pytest.mark.parametrize("kw", [{}, {"update_on_kvstore": True}, {"fused_max_leaf_size": 8},  # kernel alone
                                {"compression_params": {"type": "2bit", "threshold": 0.05}}])
def test_gradients_packed_on_the_host_give_the_same_step(kw):
    # many leaves on CPU: step packs the gradients in NumPy instead of inside the program
    opt = ("adam", {"learning_rate": 0.01, "wd": 0.01})
    ref = Trainer(init_params(), *opt, fused=True, **kw)
    packed = Trainer(init_params(), *opt, fused=True, pack_grads_on_host=True, **kw)
    assert packed._pack_on_host and not ref._pack_on_host  # 3 leaves: below the default's threshold
    for batch in BATCHES[:3]:
        for t in (ref, packed):
            t.step(t.grads(loss_fn, batch), 8)
    assert_equal(packed.params, ref.params)
    assert_equal(packed.state, ref.state)
    with pytest.raises(TypeError, match="pack_grads_on_host"):
        Trainer(init_params(), *opt, pack_grads_on_host="yes")


def test_gradients_packed_on_the_host_for_leaves_of_any_shape():
    """The packed path reads the device count from the gradients' leading axis, not from a
    parameter's first dimension (3 and 2 here, against 4 devices)."""
    t = Trainer({"a": jnp.zeros(3), "b": jnp.ones((2, 5))}, "sgd", {"learning_rate": 0.1}, fused=True,
                pack_grads_on_host=True)
    g = {"a": np.arange(12, dtype=np.float32).reshape(4, 3), "b": np.ones((4, 2, 5), np.float32)}
    t.step(g, 2)
    # MXNet sgd_update: w -= lr * rescale_grad * g, rescale_grad = 1 / batch_size, g the sum over devices
    assert_close(t.params, {"a": -0.1 * g["a"].sum(0) / 2, "b": np.full((2, 5), 1 - 0.1 * 4 / 2)}, **TOL)


def test_one_device_of_a_dist_kvstore_compresses_and_its_residual_resumes(tmp_path):
    """MXNet's _create_kvstore makes a kvstore for a 'dist' type even on one device, so Gluon
    compresses there; the single-device Trainer saves and loads its one residual per leaf."""
    kw = {"devices": DEV1, "kvstore": "dist_sync", "compression_params": {"type": "2bit", "threshold": 0.05}}
    t = Trainer(init_params(), *SGD, **kw)
    t.step(jax.tree.map(lambda p: np.full((1,) + p.shape, 0.03, np.float32), init_params()), 8)
    t.save_states(tmp_path / "ckpt")
    assert any(np.any(np.asarray(r) != 0) for r in t._residual)
    u = Trainer(init_params(), *SGD, **kw)
    u.load_states(tmp_path / "ckpt")
    assert_equal((u.params, u.state, u._residual), (t.params, t.state, t._residual))


class _FlakySchedule:
    """An untraceable MXNet-protocol schedule (Python ``if`` on the count) that
    fails once at ``num_update == fail_at`` (a bad value, or an exception)."""

    def __init__(self, fail_at, bad):
        self.base_lr, self.fail_at, self.bad, self.failed, self.seen = 0.1, fail_at, bad, False, []

    def __call__(self, num_update):
        if num_update == self.fail_at and not self.failed:
            self.failed = True
            if self.bad == "raise":
                raise RuntimeError("schedule failed")
            return self.bad
        self.seen.append(int(num_update))
        return self.base_lr / num_update if num_update > 2 else self.base_lr


@pytest.mark.parametrize("bad", ["raise", float("nan"), -1.0])
def test_a_failed_host_schedule_leaves_the_count_for_the_retry(bad):
    ref_sched, flaky = _FlakySchedule(None, None), _FlakySchedule(4, bad)
    ref = Trainer(init_params(), "sgd", {"learning_rate": 0.1, "lr_scheduler": ref_sched}, devices=DEV1)
    t = Trainer(init_params(), "sgd", {"learning_rate": 0.1, "lr_scheduler": flaky}, devices=DEV1)
    grads = [jax.tree.map(lambda g: g[None], jax.grad(loss_fn)(init_params(), b)) for b in BATCHES]
    for i in range(5):
        ref.step(grads[i % 4], 8)
        if i == 3:
            with pytest.raises((RuntimeError, ValueError)):
                t.step(grads[i % 4], 8)
        t.step(grads[i % 4], 8)  # the retry uses update 4's rate, and every later step its own
    # MXNet's count: 1 on the first update; the construction call reads update 1
    assert flaky.seen == ref_sched.seen == [1, 1, 2, 3, 4, 5]
    assert_equal(t.params, ref.params)


@pytest.mark.parametrize("protocol", ["", "_p0", "_p1"])
def test_load_states_detects_gluon_pickles_of_every_protocol(protocol):
    """The Gluon Adam fixture, re-pickled by MXNet 1.9.1 at protocols 0 and 1 (which start with MARK
    or EMPTY_DICT, not PROTO), loads into a Trainer exactly as the protocol-4 file does; was
    CheckpointError('bad magic')."""
    import warnings  # noqa: PLC0415

    import test_migrate_gluon as gluon  # noqa: PLC0415
    z, meta = gluon.load("adam")
    tx = gluon.make_tx(meta, rescale_grad=1.0)
    loaded = []
    for suffix in ("", protocol):
        t = Trainer(gluon.params_at(z, meta, meta["k"] - 1), tx, devices=DEV1)
        path = gluon.states_file("adam", meta).replace(".states", f"{suffix}.states")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's rescale_grad is 1/batch_size, the optimizer's 1
            t.load_states(path)
        loaded.append(t.state)
    assert_equal(loaded[0], loaded[1])


def test_save_and_load_states_take_every_path_type(tmp_path):
    """str, bytes and os.PathLike paths save and load (bytes failed in the stray-temp regex); an open
    binary file loads; an open file to save to is refused with a message saying why."""
    t = Trainer(init_params(), *SGD)
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    for path in (str(tmp_path / "a"), bytes(tmp_path / "b"), tmp_path / "c"):
        t.save_states(path)
        u = Trainer(init_params(), *SGD)
        u.load_states(path)
        assert_equal((u.params, u.state), (t.params, t.state))
        with open(path, "rb") as f:
            v = Trainer(init_params(), *SGD)
            v.load_states(f)
        assert_equal((v.params, v.state), (t.params, t.state))
    with open(tmp_path / "d", "wb") as f, pytest.raises(TypeError, match="needs a path"):
        t.save_states(f)


def test_two_devices_equal_one_device(one_device):
    # two local devices take the mesh path: only exactly one device is the single-device
    # program (`single_device`), and two must still sum over both
    t = train("step", jax.devices()[:2])
    assert t.num_devices == 2
    assert_close(t.params, one_device["step"], **TOL)


def test_unreplicate_gives_the_first_local_devices_copy():
    # unreplicate's docstring: "the first local device's copy ... (an array on that device)";
    # a plain x[0] of the stacked array is the same numbers but spread over the whole mesh
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for devices in (jax.devices()[:2], jax.devices()):
        first = unreplicate(replicate({"w": w, "s": np.float32(2.0)}, len(devices), devices))
        assert all(x.devices() == {devices[0]} for x in jax.tree.leaves(first)), first
        np.testing.assert_array_equal(first["w"], w)
        assert float(first["s"]) == 2.0
    # a host stack (a user's own, NumPy) gives its first row
    np.testing.assert_array_equal(unreplicate({"w": w})["w"], w[0])


def strict_loss(p, batch):
    """`loss_fn`, refusing at trace time a batch or parameters of a shape other than a user's."""
    x, y = batch
    assert x.shape[1:] == (3,) and y.ndim == 1 and p["dense"]["kernel"].shape == (3, 4), (x.shape, y.shape)
    return loss_fn(p, batch)


@pytest.mark.parametrize("devices", [DEV1, None], ids=["1dev", "4dev"])
def test_every_program_donates_the_trainers_arrays_never_the_callers(devices):
    # step, allreduce_grads + update, compile_step and set_learning_rate each donate the
    # Trainer's own parameters, optimizer buffers and compression residuals (no second copy
    # is kept), and never an array the caller still holds: the gradients it passed in; the
    # loss sees each device's batch and the parameters in the user's shapes, and every
    # program hands back the shapes it was given
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 1 device: "no gradient compression without a kvstore"
        t = Trainer(init_params(), *SGD, fused=False, devices=devices,
                    compression_params={"type": "2bit", "threshold": 0.05})
    run = t.compile_step(strict_loss)
    shapes = jax.tree.map(np.shape, (t._params, t._state, t._residual))

    def stored(*trees):  # the per-element buffers (scalar hyperparameters are not all donated)
        return [x for x in jax.tree.leaves(trees) if np.ndim(x) >= (1 if t.num_devices == 1 else 2)]

    def donated(arrays):
        return len(arrays) >= 3 and all(x.is_deleted() for x in arrays)

    before = stored(t._params, t._state, t._residual)
    # parameters and momenta; residuals too on 4 devices (Gluon compresses only with a kvstore)
    assert len(before) == (6 if t.num_devices == 1 else 9)
    grads = t.grads(strict_loss, BATCHES[0])
    assert jax.tree.map(np.shape, grads) == jax.tree.map(lambda x: (t.num_devices,) + np.shape(x), t.params)
    t.step(grads, 8)
    assert donated(before) and not any(x.is_deleted() for x in jax.tree.leaves(grads))
    before = stored(t._params, t._state)
    summed = t.allreduce_grads(t.grads(strict_loss, BATCHES[1]))
    assert jax.tree.map(np.shape, summed) == jax.tree.map(np.shape, grads)
    t.update(summed, 8)
    assert donated(before) and not any(x.is_deleted() for x in jax.tree.leaves(summed))
    before = stored(t._params, t._state, t._residual)
    loss = run(BATCHES[2], 8)
    assert np.shape(loss) == () and donated(before)
    before = stored(t._state)
    t.set_learning_rate(0.01)
    assert donated(before)
    assert jax.tree.map(np.shape, (t._params, t._state, t._residual)) == shapes


# Recorded from MXNet 1.9.1 (/work/venvs/mxnet): kv = mx.kv.create('device'),
# kv.set_gradient_compression(params), kv.init(0, nd.zeros(6)), then twice: kv.push(0, [TWO_BIT_G[0] on
# cpu(0), TWO_BIT_G[1] on cpu(1)]) and kv.pull(0, out). The same sums with {'type': '2bit', 'threshold': 0.5}
# and with {'type': '2bit'} (GradientCompressionParam: threshold set_default(0.5)).
TWO_BIT_G = np.array([[0.5, -0.5, 0.25, -0.25, 0.49, 0.0],
                      [0.5, -0.5, 0.25, -0.25, -0.49, 0.0]], np.float32)
MXNET_TWO_BIT_SUMS = [[1.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0, 0.0, 0.0]]


@pytest.mark.parametrize("params", [{"type": "2bit", "threshold": 0.5}, {"type": "2bit"}])
def test_two_bit_compression_at_the_threshold_and_by_default_as_mxnet(params):
    """MXNet's quantize_2bit (src/kvstore/gradient_compression-inl.h) sends +t where ``residual >= t``
    and -t where ``residual <= -t``: a residual exactly at the threshold is sent (issue 28 mutants of
    ``trainer/_compression.py``: > for >=, < for <=, the default 0.5 -> 1.5). Eager, per device."""
    comp = parse_compression(params)
    assert comp == Compression("2bit", 0.5)
    want, want_res = _two_bit_reference(TWO_BIT_G.astype(np.float64), 0.5, 2)
    np.testing.assert_array_equal(want, MXNET_TWO_BIT_SUMS)  # the transcription is MXNet's numbers
    res = [jnp.zeros(6, jnp.float32)] * 2
    for sums in MXNET_TWO_BIT_SUMS:
        pairs = [comp.quantize(jnp.asarray(g), r) for g, r in zip(TWO_BIT_G, res)]
        res = [r for _, r in pairs]
        np.testing.assert_array_equal(np.asarray(pairs[0][0]) + np.asarray(pairs[1][0]), sums)
    np.testing.assert_allclose(np.stack(res), want_res, rtol=0, atol=1e-7)


@pytest.mark.parametrize("params, error, match", [
    ({"threshold": 0.5}, ValueError, "'type' key"),  # MXNet: "Required parameter type ... not presented"
    ("2bit", ValueError, "'type' key"),
    ({"type": "2bit", "threshold": 0}, ValueError, "> 0 for 2bit"),  # MXNet: "Check failed: threshold > 0"
    ({"type": "2bit", "threshold": -0.5}, ValueError, "> 0 for 2bit"),
    ({"type": "2bit", "threshold": float("nan")}, ValueError, "finite"),
    ({"type": "2bit", "threshold": float("inf")}, ValueError, "finite"),
    ({"type": "1bit", "threshold": float("-inf")}, ValueError, "finite"),
    ({"type": "2bit", "threshold": 0.5, "tresh": 1}, ValueError, "unknown key 'tresh'"),
    ({"type": "2bit", "threshold": "high"}, TypeError, "threshold must be a number"),
])
def test_compression_params_refused_at_the_boundary(params, error, match):
    with pytest.raises(error, match=match):
        parse_compression(params)


def test_compression_accepts_what_mxnet_accepts_and_is_immutable():
    # 1bit takes any finite threshold, 0 and below included (MXNet 2.x SetParams checks > 0 for 2bit only)
    assert parse_compression({"type": "1bit", "threshold": -0.25}) == Compression("1bit", -0.25)
    assert parse_compression({"type": "2bit", "threshold": 1e-6}) == Compression("2bit", 1e-6)
    # the compiled programs read the threshold once: a Trainer's Compression cannot be changed later
    comp = Compression("2bit", 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        comp.threshold = 0.1
    assert hash(comp) == hash(Compression("2bit", 0.5))


def test_one_bit_compression_default_threshold_is_mxnets():
    """MXNet 2.x (apache/mxnet b84609d3fc): src/kvstore/gradient_compression.h declares one
    ``GradientCompressionParam`` with ``threshold`` ``set_default(0.5)``, and ``SetParams`` passes it to
    ``SetOneBitCompression`` unchanged (gradient_compression.cc:44-45): ``{'type': '1bit'}`` runs at 0.5.
    quantize_1bit (gradient_compression-inl.h:69-80): ``residual += grad``; +1 and ``residual -= 1``
    where ``residual > threshold``, else -1 and ``residual += 1``. A float64 transcription, eager."""
    comp = parse_compression({"type": "1bit"})
    assert comp == Compression("1bit", 0.5)
    g = np.array([0.5, 0.75, -0.2, 0.25], np.float32)  # 0.5: exactly at the threshold, sent as -1
    res, res64 = jnp.zeros(4, jnp.float32), np.zeros(4)
    for _ in range(3):
        res64 = res64 + g
        want = np.where(res64 > 0.5, 1.0, -1.0)
        res64 = res64 - want
        q, res = comp.quantize(jnp.asarray(g), res)
        np.testing.assert_array_equal(np.asarray(q), want)
        np.testing.assert_allclose(np.asarray(res), res64, rtol=0, atol=1e-6)
