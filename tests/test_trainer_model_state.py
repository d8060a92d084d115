"""Model state through the Trainer (issue 39 item 4): BatchNorm statistics carried by
``compile_step(loss_fn, model_state=..., sync_model_state=...)`` on 1 and 4 devices (conftest's fake
CPU devices), checked against plain flax/equinox loops over the same batches:

* one device: a plain ``jax.jit`` loop on the whole batch, bit for bit (both modes are the same there);
* 4 devices: a plain loop that splits each batch into 4 equal shards, runs the loss on each
  (``jax.vmap``), sums the gradients, and averages the new statistics over the shards
  (``sync_model_state=True``) or keeps one set per shard (False);
* the statistics' meaning, stated on one step: synchronised, the running mean is the one-device
  whole-batch run's (the mean of 4 equal shards' means is the whole batch's mean; the running
  variance is the mean of the shards' variances, which is not the whole batch's); per replica,
  device i's statistics are a one-device run's on shard i; a BatchNorm given
  ``axis_name=gradxform.trainer.AXIS`` (MXNet's SyncBatchNorm) equals the one-device whole-batch
  run in parameters and statistics, step after step.
"""
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import gradxform
from gradxform._rounding import rounded
from gradxform.checkpoint import load_state, save_state
from gradxform.trainer import AXIS, Trainer, split_batch

LR = 0.05
N_IN, HIDDEN, BATCH = 5, 8, 16


def batches(n=3, seed=0):
    out = []
    for k in jax.random.split(jax.random.PRNGKey(seed), n):
        x = jax.random.normal(k, (BATCH, N_IN)) * 2.0 + 0.5
        out.append((x, jnp.sin(x.sum(1))))
    return out


BATCHES = batches()


# -- the three kinds of model --------------------------------------------------------------

class LinenNet(nn.Module):
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x):
        h = nn.BatchNorm(use_running_average=False, momentum=0.9, axis_name=self.axis_name)(nn.Dense(HIDDEN)(x))
        return nn.Dense(1)(nn.relu(h))[:, 0]


def linen(axis_name=None):
    """(loss_fn(params, batch_stats, batch) -> (loss, new batch_stats), params, batch_stats)."""
    model = LinenNet(axis_name)
    variables = LinenNet().init(jax.random.PRNGKey(1), BATCHES[0][0])

    def loss_fn(params, stats, batch):
        x, y = batch
        out, updates = model.apply({"params": params, "batch_stats": stats}, x, mutable=["batch_stats"])
        return jnp.sum((out - y) ** 2), updates["batch_stats"]

    return loss_fn, variables["params"], variables["batch_stats"]


class NnxNet(nnx.Module):
    def __init__(self, rngs, axis_name=None):
        self.l1 = nnx.Linear(N_IN, HIDDEN, rngs=rngs)
        self.bn = nnx.BatchNorm(HIDDEN, momentum=0.9, axis_name=axis_name, rngs=rngs)
        self.l2 = nnx.Linear(HIDDEN, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.relu(self.bn(self.l1(x))))[:, 0]


def nnx_model(axis_name=None):
    graphdef, params, stats = nnx.split(NnxNet(nnx.Rngs(2), axis_name), nnx.Param, nnx.BatchStat)

    def loss_fn(params, stats, batch):
        x, y = batch
        model = nnx.merge(graphdef, params, stats, copy=True)  # new Variables at this trace level
        return jnp.sum((model(x) - y) ** 2), nnx.state(model, nnx.BatchStat)

    return loss_fn, params, stats


class EqxNet(eqx.Module):
    l1: eqx.nn.Linear
    bn: eqx.nn.BatchNorm
    l2: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.l1 = eqx.nn.Linear(N_IN, HIDDEN, key=k1)
        # mode="batch" (statistics and an int counter); "ema" sets a constant flag, whose aval inside
        # jax.shard_map lacks the mesh its old value has, and equinox's State.set refuses it there
        self.bn = eqx.nn.BatchNorm(HIDDEN, axis_name="batch", momentum=0.9, mode="batch")
        self.l2 = eqx.nn.Linear(HIDDEN, 1, key=k2)

    def __call__(self, x, state):
        h, state = self.bn(self.l1(x), state)
        return self.l2(jax.nn.relu(h))[0], state


def equinox_model():
    model, state = eqx.nn.make_with_state(EqxNet)(jax.random.PRNGKey(3))
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_fn(params, state, batch):
        x, y = batch
        net = eqx.combine(params, static)
        out, state = jax.vmap(net, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(x, state)
        return jnp.sum((out - y) ** 2), state

    return loss_fn, params, state


MODELS = {"linen": linen, "nnx": nnx_model, "equinox": equinox_model}


# -- plain loops (no Trainer) ---------------------------------------------------------------

def sgd(params, grads, batch_size):
    """Gluon's SGD without momentum or wd, as MXNet's kernel computes it: w -= (lr * rescale_grad) * grad,
    rescale_grad = 1/batch_size, the product rounded before the subtraction (no fused multiply-add)."""
    lr_rescale = np.float32(LR) * np.float32(1.0 / batch_size)
    return jax.tree.map(lambda p, g: p - rounded(lr_rescale * g), params, grads)


def plain_loop(loss_fn, params, stats, data):
    """The plain one-device flax loop: jax.jit of value_and_grad on each whole batch."""
    @jax.jit
    def step(params, stats, batch):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, batch)
        return sgd(params, grads, batch[0].shape[0]), stats, loss

    losses = []
    for batch in data:
        params, stats, loss = step(params, stats, batch)
        losses.append(loss)
    return params, stats, losses


def sharded_loop(loss_fn, params, stats, data, n, sync):
    """A plain loop over n equal shards of each batch (jax.vmap, axis AXIS): gradients summed over
    the shards; statistics averaged over them (sync) or one set per shard. Returns the statistics
    with a leading axis of n."""
    @jax.jit
    def step(params, per_shard, batch):
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (loss, new), grads = jax.vmap(grad_fn, in_axes=(None, 0, 0), axis_name=AXIS)(
            params, per_shard, split_batch(batch, n))
        if sync:  # floating leaves averaged; others (equinox's first-step flag) shard 0's
            new = jax.tree.map(lambda s: jnp.broadcast_to(
                jnp.mean(s, axis=0) if jnp.issubdtype(s.dtype, jnp.inexact) else s[0], s.shape), new)
        return sgd(params, jax.tree.map(lambda g: jnp.sum(g, axis=0), grads), batch[0].shape[0]), new, loss.sum()

    per_shard = jax.tree.map(lambda s: jnp.broadcast_to(s, (n,) + jnp.shape(s)), stats)
    losses = []
    for batch in data:
        params, per_shard, loss = step(params, per_shard, batch)
        losses.append(loss)
    return params, per_shard, losses


def train(loss_fn, params, stats, data, devices, sync, **trainer_kw):
    trainer = Trainer(params, "sgd", {"learning_rate": LR}, devices=devices, **trainer_kw)
    step = trainer.compile_step(loss_fn, model_state=stats, sync_model_state=sync)
    losses = [step(batch, BATCH) for batch in data]
    return trainer, losses


def close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol), a, b)


def equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


# -- one device ------------------------------------------------------------------------------

@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_one_device_is_the_plain_jit_loop(kind, sync):
    """On one device both modes are the plain jax.jit loop, bit for bit: parameters, statistics, losses."""
    loss_fn, params, stats = MODELS[kind]()
    want_params, want_stats, want_losses = plain_loop(loss_fn, params, stats, BATCHES)
    trainer, losses = train(loss_fn, params, stats, BATCHES, jax.devices()[:1], sync)
    got = trainer.model_state
    if not sync:  # one per device: a leading axis of 1
        assert all(np.shape(x)[0] == 1 for x in jax.tree.leaves(got))
        got = jax.tree.map(lambda x: x[0], got)
    equal(trainer.params, want_params)  # bit for bit (XLA CPU, jax 0.10.2)
    equal(got, want_stats)
    equal(losses, want_losses)


# -- four devices ----------------------------------------------------------------------------

@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_four_devices_are_the_sharded_plain_loop(kind, sync):
    """4 devices: the plain loop over 4 shards with the statistics averaged (sync) or kept per shard."""
    loss_fn, params, stats = MODELS[kind]()
    want_params, want_stats, want_losses = sharded_loop(loss_fn, params, stats, BATCHES, 4, sync)
    trainer, losses = train(loss_fn, params, stats, BATCHES, jax.devices(), sync)
    got = trainer.model_state
    if sync:
        want_stats = jax.tree.map(lambda s: s[0], want_stats)
    else:
        assert all(np.shape(x)[0] == 4 for x in jax.tree.leaves(got))
    close(trainer.params, want_params)
    close(got, want_stats)
    close(losses, want_losses)


def test_one_step_meaning_of_each_mode():
    """Synchronised: the running mean is the one-device whole-batch run's (the mean of 4 equal
    shards' means is the whole batch's), the running variance the mean of the shards' variances.
    Per replica: device i holds a one-device run's statistics on shard i."""
    loss_fn, params, stats = linen()
    batch = BATCHES[0]
    whole = plain_loop(loss_fn, params, stats, [batch])[1]["BatchNorm_0"]
    shards = [plain_loop(loss_fn, params, stats, [jax.tree.map(lambda a, i=i: a[4 * i:4 * i + 4], batch)])[1]
              for i in range(4)]
    synced = train(loss_fn, params, stats, [batch], jax.devices(), True)[0].model_state["BatchNorm_0"]
    close(synced["mean"], whole["mean"])
    close(synced["var"], np.mean([s["BatchNorm_0"]["var"] for s in shards], axis=0))
    assert not np.allclose(synced["var"], whole["var"], rtol=1e-3)  # the spread between shards is not in it
    replicas = train(loss_fn, params, stats, [batch], jax.devices(), False)[0].model_state
    for i in range(4):
        close(jax.tree.map(lambda x, i=i: x[i], replicas), shards[i])


@pytest.mark.parametrize("kind", ["linen", "nnx"])
def test_sync_batchnorm_axis_name_is_the_whole_batch_run(kind):
    """A BatchNorm given axis_name=gradxform.trainer.AXIS (MXNet's SyncBatchNorm) normalizes with the
    statistics of all devices: 4 devices are the one-device run on the whole batch, parameters and
    statistics, over several steps."""
    loss_fn, params, stats = MODELS[kind]()
    want_params, want_stats, want_losses = plain_loop(loss_fn, params, stats, BATCHES)
    sync_loss = (linen if kind == "linen" else nnx_model)(AXIS)[0]
    for devices in (jax.devices(), jax.devices()[:1]):
        trainer, losses = train(sync_loss, params, stats, BATCHES, devices, True)
        close(trainer.params, want_params)
        close(trainer.model_state, want_stats)
        close(losses, want_losses)


@pytest.mark.parametrize("trainer_kw", [{"fused": False}, {"shard_optimizer_state": True},
                                        {"loss_scale": "dynamic"}], ids=["per_leaf", "sharded", "loss_scale"])
def test_other_layouts_carry_the_same_state(trainer_kw):
    """The per-leaf layout, the sharded optimizer state and a dynamic loss scale change nothing."""
    loss_fn, params, stats = linen()
    want, want_losses = train(loss_fn, params, stats, BATCHES, jax.devices(), True)
    got, losses = train(loss_fn, params, stats, BATCHES, jax.devices(), True, **trainer_kw)
    close(got.params, want.params)
    close(got.model_state, want.model_state)
    close(losses, want_losses)


# -- never silently frozen -------------------------------------------------------------------

@pytest.mark.parametrize("sync", [True, False])
def test_state_changes_every_step(sync):
    """The statistics move at every step (a state captured by a closure instead would stay at its
    first value: the docs show model_state=); the returned copies are not deleted by later steps."""
    loss_fn, params, stats = linen()
    trainer = Trainer(params, "sgd", {"learning_rate": LR})
    step = trainer.compile_step(loss_fn, model_state=stats, sync_model_state=sync)
    seen = [trainer.model_state]
    for batch in BATCHES:
        step(batch, BATCH)
        seen.append(trainer.model_state)
    means = [np.asarray(s["BatchNorm_0"]["mean"]) for s in seen]  # reads every copy after all steps
    for before, after in zip(means, means[1:]):
        assert not np.allclose(before, after)


def test_state_in_batch_says_what_to_do():
    """Model state passed inside ``batch`` is split over the devices like the examples: the shape
    error (here jax's "incompatible shapes for broadcasting") carries a note naming model_state=."""
    loss_fn, params, stats = linen()

    def via_batch(p, batch):
        data, s = batch
        return loss_fn(p, s, data)[0]

    trainer = Trainer(params, "sgd", {"learning_rate": LR})
    with pytest.raises(TypeError, match="model_state=state") as info:
        trainer.compile_step(via_batch)((BATCHES[0], stats), BATCH)
    assert "incompatible shapes" in str(info.value)
    assert "batch[1]['BatchNorm_0']['mean'] (8,) -> (2,)" in "".join(info.value.__notes__)
    with pytest.raises(TypeError, match="model_state=state"):
        trainer.grads(via_batch, (BATCHES[0], stats))


# -- get / set, checkpoints ------------------------------------------------------------------

@pytest.mark.parametrize("sync", [True, False])
def test_model_state_saved_beside_the_trainer_resumes(sync, tmp_path):
    """save_states holds parameters and optimizer state; the model state is saved beside it
    (gradxform.save_state(path, trainer.model_state)) and assigned back: training continues as
    if never stopped."""
    loss_fn, params, stats = linen()
    data = batches(4, seed=1)
    want, want_losses = train(loss_fn, params, stats, data, jax.devices(), sync)

    first = Trainer(params, "sgd", {"learning_rate": LR})
    step = first.compile_step(loss_fn, model_state=stats, sync_model_state=sync)
    losses = [step(b, BATCH) for b in data[:2]]
    first.save_states(tmp_path / "trainer.states")
    save_state(tmp_path / "model_state", first.model_state)

    second = Trainer(params, "sgd", {"learning_rate": LR})
    step = second.compile_step(loss_fn, model_state=stats, sync_model_state=sync)
    second.load_states(tmp_path / "trainer.states")
    second.model_state = load_state(tmp_path / "model_state", like=second.model_state)
    losses += [step(b, BATCH) for b in data[2:]]
    equal(second.params, want.params)
    equal(second.model_state, want.model_state)
    equal(losses, want_losses)


def test_setter_one_copy_or_per_device_and_errors():
    loss_fn, params, stats = linen()
    trainer = Trainer(params, "sgd", {"learning_rate": LR})
    assert trainer.model_state is None
    with pytest.raises(AttributeError, match="compile_step"):
        trainer.model_state = stats
    trainer.compile_step(loss_fn, model_state=stats, sync_model_state=False)
    per_device = jax.tree.map(lambda s: jnp.stack([s + i for i in range(4)]), stats)
    trainer.model_state = per_device  # one per device
    equal(trainer.model_state, per_device)
    trainer.model_state = stats  # one copy: every device
    equal(trainer.model_state, jax.tree.map(lambda s: jnp.stack([s] * 4), stats))
    with pytest.raises(ValueError, match="structure"):
        trainer.model_state = {"other": stats}
    with pytest.raises(TypeError, match="sync_model_state"):
        trainer.compile_step(loss_fn, model_state=stats, sync_model_state="yes")


def test_loss_fn_returning_the_wrong_tree_is_told():
    """A linen loss returning apply's whole mutable dict ({'batch_stats': ...}) is told which entry."""
    loss_fn, params, stats = linen()

    def whole_dict(p, s, batch):
        loss, new = loss_fn(p, s, batch)
        return loss, {"batch_stats": new}

    trainer = Trainer(params, "sgd", {"learning_rate": LR})
    with pytest.raises(ValueError, match="return that entry"):
        trainer.compile_step(whole_dict, model_state=stats)(BATCHES[0], BATCH)


def test_has_aux_and_reduce_aux_with_model_state():
    """has_aux=True: loss_fn returns (loss, (new_model_state, aux)); run returns (loss, aux)."""
    loss_fn, params, stats = linen()

    def with_aux(p, s, batch):
        loss, new = loss_fn(p, s, batch)
        return loss, (new, {"n": jnp.asarray(batch[0].shape[0], jnp.float32)})

    plain, _ = train(loss_fn, params, stats, BATCHES[:1], jax.devices(), True)
    trainer = Trainer(params, "sgd", {"learning_rate": LR})
    loss, aux = trainer.compile_step(with_aux, model_state=stats, has_aux=True, reduce_aux="sum")(BATCHES[0], BATCH)
    assert float(aux["n"]) == BATCH
    equal(trainer.model_state, plain.model_state)
    equal(trainer.params, plain.params)


def test_axis_is_exported():
    assert gradxform.trainer.AXIS == AXIS
