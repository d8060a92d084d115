"""gradxform.Trainer: Gluon's keywords and semantics that are not about the numbers of one step
(kvstore, update_on_kvstore, compression without a kvstore, multipliers kept by load_states), model
state beside the loss (``has_aux``), and the mesh behind it (no ``jax.pmap``; a user's own pmapped
gradients taken as they are). 4 fake CPU devices (conftest)."""
import ast
import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import get_hyper
from gradxform.trainer import Trainer, split_batch
from test_trainer import BATCHES, DEV1, SGD, assert_close, assert_equal, init_params, loss_fn

ADAM_MULTS = ("adam", {"learning_rate": 0.05, "wd": 1e-3, "lr_mult": {"dense/*": 2.0}, "wd_mult": {"*bias": 0.0}})


def loss_with_aux(p, batch):
    """The summed loss, and per-device statistics of the hidden layer (as BatchNorm's running mean)."""
    x, y = batch
    h = jnp.tanh(x @ p["dense"]["kernel"] + p["dense"]["bias"])
    return jnp.sum((h @ p["out"] - y) ** 2), {"mean": jnp.mean(h, axis=0), "count": jnp.asarray(x.shape[0])}


def test_no_pmap_in_the_library():
    """The Trainer runs on jax.jit over a device mesh: no code (docstrings aside) names jax.pmap."""
    package = pathlib.Path(__file__).resolve().parents[1] / "src" / "gradxform"
    uses = [f"{f.name}:{node.lineno}" for f in package.rglob("*.py") for node in ast.walk(ast.parse(f.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "pmap"]
    assert uses == []


def test_compile_step_has_aux_returns_each_devices_aux_and_same_params():
    plain, with_aux = Trainer(init_params(), *SGD), Trainer(init_params(), *SGD)
    run_plain, run_aux = plain.compile_step(loss_fn), with_aux.compile_step(loss_with_aux, has_aux=True)
    for batch in BATCHES[:3]:
        loss = run_plain(batch, 8)
        loss_a, aux = run_aux(batch, 8)
        assert float(loss) == float(loss_a)
        n = jax.local_device_count()
        assert aux["mean"].shape == (n, 4) and aux["count"].shape == (n,)
        assert np.asarray(aux["count"]).tolist() == [8 // n] * n
    assert_equal(plain.params, with_aux.params)
    # the aux is of the parameters the step started from: device 0's mean of the last batch at those
    x, _ = split_batch(BATCHES[3], jax.local_device_count())
    params = with_aux.params
    _, aux = run_aux(BATCHES[3], 8)
    h = jnp.tanh(x[0] @ params["dense"]["kernel"] + params["dense"]["bias"])
    np.testing.assert_allclose(np.asarray(aux["mean"][0]), np.asarray(jnp.mean(h, 0)), rtol=1e-6)


@pytest.mark.parametrize("devices", [None, DEV1], ids=["4_devices", "1_device"])
def test_compile_step_reduces_aux_over_devices_where_asked(devices):
    stacked = Trainer(init_params(), *SGD, devices=devices).compile_step(loss_with_aux, has_aux=True)
    mean = Trainer(init_params(), *SGD, devices=devices).compile_step(loss_with_aux, has_aux=True,
                                                                      reduce_aux="mean")
    total = Trainer(init_params(), *SGD, devices=devices).compile_step(loss_with_aux, has_aux=True,
                                                                       reduce_aux="sum")
    for batch in BATCHES[:2]:
        (_, each), (_, avg), (_, summed) = stacked(batch, 8), mean(batch, 8), total(batch, 8)
        n = np.shape(each["count"])[0]
        assert np.shape(avg["mean"]) == (4,) and np.shape(summed["count"]) == ()
        np.testing.assert_allclose(np.asarray(avg["mean"]), np.asarray(each["mean"]).mean(0), rtol=1e-6)
        assert int(summed["count"]) == 8 and n == (1 if devices else jax.local_device_count())
    with pytest.raises(ValueError, match="reduce_aux"):
        Trainer(init_params(), *SGD).compile_step(loss_with_aux, has_aux=True, reduce_aux="max")
    with pytest.raises(ValueError, match="has_aux=True"):
        Trainer(init_params(), *SGD).compile_step(loss_fn, reduce_aux="mean")


@pytest.mark.parametrize("loss_scale", [None, "dynamic"])
def test_grads_has_aux_follows_jax_grad(loss_scale):
    t = Trainer(init_params(), *SGD, loss_scale=loss_scale)
    grads, aux = t.grads(loss_with_aux, BATCHES[0], has_aux=True)
    assert_equal(grads, t.grads(loss_fn, BATCHES[0]))
    (loss, aux2), grads2 = t.grads(loss_with_aux, BATCHES[0], has_aux=True, with_loss=True)
    assert_equal((grads, aux), (grads2, aux2))
    np.testing.assert_allclose(np.asarray(loss), np.asarray(t.grads(loss_fn, BATCHES[0], with_loss=True)[0]))
    # each device's loss of its shard, the loss scale divided out (a power of 2: exact)
    n = jax.local_device_count()
    shards = split_batch(BATCHES[0], n)
    want = [float(loss_fn(init_params(), jax.tree.map(lambda x: x[k], shards))) for k in range(n)]
    np.testing.assert_allclose(np.asarray(loss), want, rtol=1e-6)
    t.step(grads, 8)


def test_kvstore_keywords_as_gluon_spells_them():
    for kv in ("device", "local", "dist_sync", "nccl", None):
        Trainer(init_params(), *SGD, kvstore=kv, update_on_kvstore=None)
    with pytest.raises(ValueError, match="dist_sync"):
        Trainer(init_params(), *SGD, kvstore="dist_async")
    with pytest.raises(ValueError, match="kvstore"):
        Trainer(init_params(), *SGD, kvstore="devcie")
    assert Trainer(init_params(), *SGD, update_on_kvstore=True)._zero is not None  # tests/test_trainer_zero.py
    with pytest.raises(TypeError, match="update_on_kvstore"):
        Trainer(init_params(), *SGD, update_on_kvstore="yes")


def test_compression_only_where_gluon_has_a_kvstore():
    comp = {"type": "2bit", "threshold": 0.05}
    with pytest.warns(UserWarning, match="no gradient compression without a kvstore"):
        one = Trainer(init_params(), *SGD, devices=DEV1, compression_params=comp)
    plain = Trainer(init_params(), *SGD, devices=DEV1)
    for batch in BATCHES[:3]:
        for t in (one, plain):
            t.step(t.grads(loss_fn, batch), 8)
    assert_equal(one.params, plain.params)  # exact gradients, as Gluon's kvstore-less single device
    with pytest.warns(UserWarning, match="kvstore=None"):
        Trainer(init_params(), *SGD, kvstore=None, compression_params=comp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(init_params(), *SGD, compression_params=comp)  # 4 devices: compressed, no warning


def test_load_states_keeps_the_current_multipliers(tmp_path):
    a = Trainer(init_params(), *ADAM_MULTS)
    for batch in BATCHES[:2]:
        a.step(a.grads(loss_fn, batch), 8)
    a.save_states(tmp_path / "s")
    name, kw = ADAM_MULTS
    b = Trainer(init_params(), name, dict(kw, lr_mult={"dense/*": 0.5}, wd_mult={"*bias": 1.0}))
    b.load_states(tmp_path / "s")
    from gradxform._state_paths import state_paths  # noqa: PLC0415
    mults = {f: [node for _, node in state_paths(b.state) if hasattr(node, f)] for f in ("lr_mult", "wd_mult")}
    lr = np.asarray(mults["lr_mult"][0].lr_mult)
    assert sorted(float(x) for x in lr) == [0.5, 0.5, 1.0]  # dense/bias, dense/kernel, out
    assert mults["wd_mult"][0].wd_mult is None  # every multiplier 1: none stored (the file held some)
    assert get_hyper(b.state, "learning_rate") == np.float32(0.05)
    assert_equal(b.params, a.params)  # parameters and moments are the file's
    # the other way round: a file without multipliers (every one 1) into a Trainer that has some
    plain = Trainer(init_params(), name, {"learning_rate": 0.05, "wd": 1e-3})
    plain.save_states(tmp_path / "plain")
    b.load_states(tmp_path / "plain")
    lr = [node for _, node in state_paths(b.state) if hasattr(node, "lr_mult")][0].lr_mult
    assert sorted(float(x) for x in np.asarray(lr)) == [0.5, 0.5, 1.0]
    assert_equal(b.params, plain.params)


def test_a_users_own_pmap_gradients_are_taken_as_they_are():
    """The gradients of ``jax.pmap(jax.grad(loss))`` over replicated parameters, as a pmap training loop
    has them, drive ``step`` exactly as the Trainer's own ``grads`` do."""
    n = jax.local_device_count()
    ours, theirs = Trainer(init_params(), *SGD), Trainer(init_params(), *SGD)
    grad_fn = jax.pmap(jax.grad(loss_fn))
    for batch in BATCHES[:3]:
        ours.step(ours.grads(loss_fn, batch), 8)
        replicated = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n,) + x.shape), theirs.params)
        theirs.step(grad_fn(replicated, split_batch(batch, n)), 8)
    assert_equal(ours.params, theirs.params)


def test_load_states_reads_a_gluon_states_file_and_continues_mxnets_run():
    """A Gluon ``Trainer.save_states`` file written by MXNet 1.9.1 (tests/fixtures/mxnet/adam), loaded
    straight into a Trainer: the next steps are MXNet's (rtol 1e-5 / atol 1e-6, as the migration tests)."""
    import test_migrate_gluon as gluon  # noqa: PLC0415

    z, meta = gluon.load("adam")
    k, batch_size = meta["k"], meta["batch_size"]
    # the Trainer sets rescale_grad = 1 / batch_size each step, as Gluon's Trainer.step does
    tx = gluon.make_tx(meta, rescale_grad=1.0)
    t = Trainer(gluon.params_at(z, meta, k - 1), tx, devices=DEV1)
    with warnings.catch_warnings():
        # the file's rescale_grad is 1/batch_size, the optimizer's 1: step() sets it, so no warning (issue 39)
        warnings.simplefilter("error")
        t.load_states(gluon.states_file("adam", meta))
    for step in range(k, meta["n"]):
        g = {n: np.asarray(z[f"g_{step}_{n}"])[None] for n in meta["names"]}
        t.step(g, batch_size)
        gluon.assert_params(z, meta, step, t.params)


def test_load_states_takes_a_migrated_state_tree_and_refuses_another_structure():
    a = Trainer(init_params(), *SGD)
    a.step(a.grads(loss_fn, BATCHES[0]), 8)
    b = Trainer(a.params, *SGD)
    b.load_states(a.state)
    for t in (a, b):
        t.step(t.grads(loss_fn, BATCHES[1]), 8)
    assert_equal(a.params, b.params)
    with pytest.raises(ValueError, match="structure"):
        b.load_states({"not": "a state"})


def test_adam_offload_trains_in_a_trainer_on_one_device():
    """Its moments live in host memory ('pinned_host'); the Trainer places them there and gives the numbers
    of the plain transformation (run eagerly here: another program, so 1 float32 ulp apart at most)."""
    t = Trainer(init_params(), "mindspore.adam_offload", {"learning_rate": 0.01}, devices=DEV1)
    tx = gradxform.create("mindspore.adam_offload", learning_rate=0.01)
    params = init_params()
    state = tx.init(params)
    for batch in BATCHES[:3]:
        g = jax.grad(loss_fn)(params, batch)
        t.step(jax.tree.map(lambda x: x[None], g), 1)
        updates, state = tx.update(g, state, params)
        params = gradxform.apply_updates(params, updates)
    assert_close(t.params, params, rtol=2.5e-7, atol=0)


class _InitOnly:
    """Has ``init`` but no ``update``: not a transformation."""

    def init(self, params):
        return ()


def test_constructor_defaults_and_choices_as_the_docstring_states(monkeypatch):
    """Issue 28 mutants of ``trainer/_trainer.py``: each line is a sentence of the Trainer's docstring.
    Construction only (no step is compiled but the last one)."""
    from gradxform import _flat  # noqa: PLC0415
    from gradxform.trainer import _allreduce as ar  # noqa: PLC0415

    # "optimizer: a name for gradxform.create or a ready transformation" (init *and* update)
    with pytest.raises(TypeError, match="expected an optimizer name or a transformation; got _InitOnly"):
        Trainer(init_params(), _InitOnly())
    # "skip_nonfinite: True, or a dict of keywords for the guard": True is the guard's defaults (100)
    guarded = Trainer(init_params(), *SGD, skip_nonfinite=True)
    assert int(guarded.state.guard.max_consecutive) == 100 and int(guarded.state.guard.skipped) == 0
    # "loss_scale: the current dynamic loss scale (1.0 without loss_scale=)"
    assert Trainer(init_params(), *SGD).loss_scale == 1.0
    # "Leaves of more than fused_max_leaf_size elements (default 2**16) keep a buffer of their own"
    small = {"a": jnp.zeros(2), "b": jnp.zeros(3)}
    at_bound = Trainer(dict(small, big=jnp.zeros(2 ** 16)), *SGD)
    past_bound = Trainer(dict(small, big=jnp.zeros(2 ** 16 + 1)), *SGD)
    assert at_bound.fused and len(at_bound._params.buffers) == 1
    assert past_bound.fused and len(past_bound._params.buffers) == 2
    # "pack_grads_on_host: None: from 10,000 leaves on CPU devices of one process" (the threshold
    # lowered to this tree's 3 leaves, so that the choice is made with devices=None and with devices)
    assert ar.HOST_PACK_LEAVES == 10_000
    monkeypatch.setattr(ar, "HOST_PACK_LEAVES", 3)
    assert Trainer(init_params(), *SGD)._pack_on_host
    assert Trainer(init_params(), *SGD, devices=jax.devices())._pack_on_host
    assert not Trainer(init_params(), *SGD, fused=False)._pack_on_host  # the fused layout only
    monkeypatch.setattr(ar, "HOST_PACK_LEAVES", 4)
    t = Trainer(init_params(), *SGD)
    assert t.fused and not t._pack_on_host
    packed = []
    real = _flat.Layout.pack_host
    monkeypatch.setattr(_flat.Layout, "pack_host", lambda self, *a: packed.append(1) or real(self, *a))
    t.step(t.grads(loss_fn, BATCHES[0]), 8)
    assert packed == []  # below the threshold the step packs inside the program


def test_kvstore_warnings_point_at_the_users_trainer_line():
    """Issue 28 mutants of ``trainer/_kvstore.py`` (stacklevel 3 -> 4): the two "no kvstore" warnings
    name the line that built the Trainer (Python prints that line), not a line inside gradxform."""
    comp = {"type": "2bit", "threshold": 0.05}
    for kw, match in (({"kvstore": None, "compression_params": comp}, "no gradient compression"),
                      ({"kvstore": None, "update_on_kvstore": True}, "no kvstore to update on")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Trainer({"w": jnp.zeros(3)}, *SGD, **kw)
        (w,) = [w for w in caught if match in str(w.message)]
        assert (w.filename, w.category) == (__file__, UserWarning), (w.filename, kw)


@pytest.mark.parametrize("call, args, said", [
    ("allreduce_grads", (), "summed = trainer.allreduce_grads(grads) with grads = trainer.grads(loss_fn, batch)"),
    ("allreduce_grads", (16,), "summed = trainer.allreduce_grads(grads) with grads = trainer.grads(loss_fn, batch)"),
    ("update", (), "trainer.update(summed, batch_size) with summed = trainer.allreduce_grads(grads)"),
    ("step", (), "trainer.step(grads, batch_size) with grads = trainer.grads(loss_fn, batch)"),
])
def test_gluons_calls_without_gradients_say_what_to_type(call, args, said):
    """Gluon's ``trainer.allreduce_grads()`` (autograd left the gradients on the parameters) and a
    bare ``update()``/``step()``: a TypeError naming the call and what to type, nothing changed."""
    t = Trainer(init_params(), *SGD, devices=DEV1)
    before = t.params
    with pytest.raises(TypeError, match=re.escape(f"Trainer.{call}({', '.join(map(repr, args))}): ")) as err:
        getattr(t, call)(*args)
    assert said in str(err.value) and "missing 1 required" not in str(err.value)
    assert_equal(t.params, before)
