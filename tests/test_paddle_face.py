"""gradxform.paddle.Optimizer: Paddle's stateful optimizer object over the pure pair (issue 38 items 1, 2).

A real-script-shaped loop (AdamW with groups under LinearWarmup over
CosineAnnealingDecay, stepped per batch) saved through ``opt.state_dict()`` and
resumed into a fresh optimizer and scheduler continues bit for bit; the
recorded surface of Paddle 3.3.1's objects (tests/data/surface/objects/paddle.json)
is walked; a failed ``set_state_dict`` changes nothing.
"""
import json
import math
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform import paddle as P
from gradxform.migrate import MigrateError, from_paddle_state_dict, read_paddle_state_dict
from gradxform.migrate._paddle import to_paddle_state_dict

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = json.load(open(os.path.join(HERE, "data", "surface", "objects", "paddle.json")))
BASE_LR, WARMUP, T_MAX = 1e-2, 4, 10

pytestmark = pytest.mark.filterwarnings("ignore:There are some unused values in state_dict")


def _model():
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    return {"dense": {"weight": jax.random.normal(k[0], (4, 3)), "bias": jnp.zeros(3)},
            "head": {"weight": jax.random.normal(k[1], (3, 2)), "bias": jnp.zeros(2)}}


def _batch(t):
    k = jax.random.split(jax.random.PRNGKey(100 + t))
    return jax.random.normal(k[0], (8, 4)), jax.random.normal(k[1], (8, 2))


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["dense"]["weight"] + p["dense"]["bias"])
    return jnp.mean((h @ p["head"]["weight"] + p["head"]["bias"] - y) ** 2)


def _flat(params):
    return {n: v for n, v in zip(gx.param_names(params), jax.tree.leaves(params))}


def _sched():
    return P.lr.LinearWarmup(P.lr.CosineAnnealingDecay(BASE_LR, T_max=T_MAX), WARMUP, 0.0, BASE_LR)


def _adamw(params, sched):
    """The Paddle script's groups: weights decayed, biases not, the head at half the rate."""
    flat = _flat(params)
    groups = [{"params": {n: v for n, v in flat.items() if n.endswith("weight") and n.startswith("dense")}},
              {"params": {n: v for n, v in flat.items() if n.endswith("bias")}, "weight_decay": 0.0},
              {"params": {"head/weight": flat["head/weight"]}, "learning_rate": 0.5}]
    return P.AdamW(learning_rate=sched, parameters=groups, weight_decay=0.05)


def _train(opt, sched, start, stop, lrs=None):
    for t in range(start, stop):
        x, y = _batch(t)
        grads = jax.grad(loss_fn)(opt.parameters, x, y)   # loss.backward()
        opt.step(grads)                                   # opt.step()
        if lrs is not None:
            lrs.append(opt.get_lr())                      # the rate just applied
        opt.clear_grad()
        if isinstance(opt._learning_rate, P.lr.LRScheduler):
            opt._learning_rate.step()                     # the script steps the scheduler per batch
    return {n: np.asarray(v) for n, v in _flat(opt.parameters).items()}


def _paddle_rate(epoch):
    """Paddle's LinearWarmup over CosineAnnealingDecay at ``last_epoch`` (paddle/optimizer/lr.py):
    the inner scheduler stepped to ``epoch - warmup`` in closed form."""
    if epoch < WARMUP:
        return BASE_LR * epoch / WARMUP
    return 0.5 * BASE_LR * (1 + math.cos(math.pi * (epoch - WARMUP) / T_MAX))


@pytest.mark.parametrize("k", [2, 7])
def test_resume_from_state_dict_continues_bit_for_bit(k):
    n = 12
    sched = _sched()
    opt = _adamw(_model(), sched)
    assert isinstance(opt, P.Optimizer)
    lrs_full = []
    full = _train(opt, sched, 0, n, lrs_full)

    sched1 = _sched()
    opt1 = _adamw(_model(), sched1)
    _train(opt1, sched1, 0, k)
    saved = opt1.state_dict()
    assert saved["LR_Scheduler"]["last_epoch"] == k and "dense.weight_moment1_0" in saved
    params_k = opt1.parameters
    del opt1, sched1

    sched2 = _sched()  # a fresh process: a new scheduler, a new optimizer, the saved parameters
    opt2 = _adamw(params_k, sched2)
    opt2.set_state_dict(saved)
    assert sched2.last_epoch == k
    assert opt2.get_lr() == pytest.approx(_paddle_rate(k), rel=1e-12, abs=1e-15)  # not warmup restarted
    assert opt2.get_lr() == lrs_full[k]
    lrs = []
    resumed = _train(opt2, sched2, k, n, lrs)
    assert lrs == lrs_full[k:]
    for name in full:
        np.testing.assert_array_equal(resumed[name], full[name], err_msg=name)


def test_get_lr_before_and_after_scheduler_step():
    sched = _sched()
    opt = _adamw(_model(), sched)
    for t in range(WARMUP + 3):
        assert opt.get_lr() == sched() == pytest.approx(_paddle_rate(t), abs=1e-15)
        x, y = _batch(t)
        opt.step(jax.grad(loss_fn)(opt.parameters, x, y))
        assert opt.get_lr() == sched() == pytest.approx(_paddle_rate(t), abs=1e-15)  # just applied
        sched.step()
        assert opt.get_lr() == pytest.approx(_paddle_rate(t + 1), abs=1e-15)  # the next one
    assert opt._learning_rate is sched


def test_the_face_is_the_pure_pair_and_a_users_jit_matches():
    """The face's steps equal the pure pair under the user's own jit, bit for bit."""
    sched_a, sched_b = _sched(), _sched()
    opt = _adamw(_model(), sched_a)
    ref = _adamw(_model(), sched_b)
    tx, params = ref.tx, ref.parameters
    state = tx.init(params)

    @jax.jit
    def train_step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gx.apply_updates(params, updates), state

    for t in range(6):
        x, y = _batch(t)
        opt.step(jax.grad(loss_fn)(opt.parameters, x, y))
        params, state = train_step(params, state, jax.grad(loss_fn)(params, x, y))
        sched_a.step()
        sched_b.step()
    for name, v in _flat(params).items():
        np.testing.assert_array_equal(np.asarray(_flat(opt.parameters)[name]), np.asarray(v), err_msg=name)


def test_step_traces_once_across_rate_changes():
    sched = _sched()
    opt = _adamw(_model(), sched)
    const = P.Momentum(learning_rate=0.1, parameters=_model())
    for t in range(WARMUP + 3):
        x, y = _batch(t)
        opt.step(jax.grad(loss_fn)(opt.parameters, x, y))
        sched.step()
        const.step(jax.grad(loss_fn)(const.parameters, x, y))
        const.set_lr(0.1 / (t + 2))
    assert opt._step._cache_size() == 1
    assert const._step._cache_size() == 1
    # Paddle casts the rate to float32 for its kernel; the state keeps that float32
    assert const.get_lr() == const._learning_rate == float(np.float32(0.1 / (WARMUP + 4)))


def test_set_lr_under_a_scheduler_is_paddles_error():
    opt = _adamw(_model(), _sched())
    with pytest.raises(RuntimeError, match="can't be LRScheduler"):
        opt.set_lr(0.1)


def _same_state(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("spoil, match", [
    (lambda sd: sd.pop("head.bias_moment2_0"), "moment2"),
    (lambda sd: sd.__setitem__("dense.bias_moment1_0", np.zeros(7, np.float32)), r"dense/bias"),
    (lambda sd: sd.__setitem__("dense.gamma_moment1_0", np.zeros(3, np.float32)), "dense.gamma_moment1_0"),
    (lambda sd: sd.pop("LR_Scheduler"), "LR_Scheduler"),
    (lambda sd: sd["LR_Scheduler"].pop("LinearWarmup_LR"), "LR_Scheduler"),
])
def test_failed_set_state_dict_leaves_the_optimizer_as_it_was(spoil, match):
    sched = _sched()
    opt = _adamw(_model(), sched)
    _train(opt, sched, 0, 3)
    sd = opt.state_dict()
    sd["LR_Scheduler"]["last_epoch"] = 9  # a different position: must not leak into the scheduler
    spoil(sd)
    before_state = jax.tree.map(np.asarray, opt.state)
    before_params = jax.tree.map(np.asarray, opt.parameters)
    before_sched = json.dumps(sched.state_dict(), sort_keys=True)
    with pytest.raises(MigrateError, match=match):
        opt.set_state_dict(sd)
    _same_state(opt.state, before_state)
    _same_state(opt.parameters, before_params)
    assert json.dumps(sched.state_dict(), sort_keys=True) == before_sched
    _train(opt, sched, 3, 4)  # still usable


def test_step_without_gradients_and_minimize_say_what_to_write():
    opt = _adamw(_model(), _sched())
    with pytest.raises(TypeError, match=r"opt.step\(grads\)"):
        opt.step()
    with pytest.raises(NotImplementedError, match=r"jax.grad\(loss_fn\)"):
        opt.minimize(jnp.float32(0.0))
    with pytest.raises(TypeError, match=r"set_lr"):
        opt._param_groups[0]["learning_rate"] = 2.0
    with pytest.raises(ValueError, match="structure of opt.parameters"):
        opt.step({"w": jnp.ones(3)})


def test_names_still_select_and_give_the_pure_pair():
    tx = P.AdamW(learning_rate=0.1, parameters=["dense/*"])
    assert isinstance(tx, P._common.PaddleOptimizer) and not isinstance(tx, P.Optimizer)
    groups = P.AdamW(learning_rate=0.1, parameters=[{"params": ["dense/*"]}, {"params": ["head/*"]}])
    assert isinstance(groups, P._common.PaddleOptimizer)


def test_pairs_and_nnx_module_bind():
    nnx = pytest.importorskip("flax.nnx")
    pairs = P.SGD(learning_rate=0.5, parameters=[("w", jnp.ones(3)), ("b", jnp.zeros(2))])
    pairs.step({"b": jnp.ones(2), "w": jnp.ones(3)})
    np.testing.assert_array_equal(pairs.parameters["w"], np.full(3, 0.5, np.float32))

    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    opt = P.Momentum(learning_rate=0.1, parameters=model)
    x = jnp.ones((4, 3))
    before = np.asarray(model.kernel[...])
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
    opt.step(grads)
    assert not np.array_equal(np.asarray(model.kernel[...]), before)  # updated in place, as nnx.Optimizer
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), np.asarray(opt.parameters["kernel"][...]))


# -- Paddle's own files ---------------------------------------------------------------------------

FIX = os.path.join(HERE, "fixtures", "paddle")
GOLD = os.path.join(HERE, "goldens", "paddle")
PDOPT = sorted(f[4:-6] for f in os.listdir(FIX) if f.startswith("opt_") and f.endswith(".pdopt")
               and "bf16_multi" not in f)


@pytest.mark.parametrize("case", PDOPT)
def test_state_dict_writes_paddles_layout(case):
    """A .pdopt Paddle 3.3.1 saved, read into gradxform state and written back, is the file:
    same keys, shapes, dtypes and bits (the writer is the reader's inverse)."""
    from test_paddle_optimizers_parity import _load, build
    z, meta = _load(case)
    dtype = jnp.bfloat16 if meta["dtype"] == "bfloat16" else jnp.float32
    params = {n: jnp.asarray(z[f"w_9_{i}"]).astype(dtype) for i, n in enumerate(meta["names"])}
    path = os.path.join(FIX, f"opt_{case}.pdopt")
    tx = build(meta)
    state = from_paddle_state_dict(path, params, tx)
    want = {k: v for k, v in read_paddle_state_dict(path).items() if k != "LR_Scheduler"}
    got = to_paddle_state_dict(state, params)
    assert sorted(got) == sorted(want)
    for key, v in want.items():
        if key == "master_weights":
            assert sorted(got[key]) == sorted(v)
            continue
        assert got[key].dtype == v.dtype and got[key].shape == v.shape, key
        np.testing.assert_array_equal(got[key], v, err_msg=key)


def test_a_pdopt_paddle_saved_loads_into_the_face_and_continues():
    from test_paddle_optimizers_parity import _load, build
    case = "adamw_groups"
    z, meta = _load(case)
    params = {n: jnp.asarray(z[f"w_9_{i}"]) for i, n in enumerate(meta["names"])}
    kw = build(meta)
    del kw
    opt_kwargs = dict(meta.get("kwargs", {}))
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": {n: params[n] for n in g["params"]}}
              for g in meta["groups"]]
    opt = P.AdamW(**opt_kwargs, parameters=groups)
    opt.set_state_dict(os.path.join(FIX, f"opt_{case}.pdopt"))
    for t in range(10, meta["steps"]):
        opt.step({n: jnp.asarray(z[f"g_{t}_{i}"]) for i, n in enumerate(meta["names"])})
        for i, n in enumerate(meta["names"]):
            np.testing.assert_allclose(np.asarray(opt.parameters[n]), z[f"w_{t}_{i}"], rtol=1e-5, atol=1e-6)


# -- the recorded surface ---------------------------------------------------------------------------

SCHED_ARGS = {  # as tools/record_object_surface_paddle.py built them
    "NoamDecay": dict(d_model=16, warmup_steps=4), "PiecewiseDecay": dict(boundaries=[2], values=[0.1, 0.01]),
    "NaturalExpDecay": dict(learning_rate=0.1, gamma=0.5), "InverseTimeDecay": dict(learning_rate=0.1, gamma=0.5),
    "PolynomialDecay": dict(learning_rate=0.1, decay_steps=4),
    "LinearWarmup": dict(learning_rate=0.1, warmup_steps=2, start_lr=0.0, end_lr=0.1),
    "ExponentialDecay": dict(learning_rate=0.1, gamma=0.5), "MultiStepDecay": dict(learning_rate=0.1, milestones=[2, 4]),
    "StepDecay": dict(learning_rate=0.1, step_size=2), "LambdaDecay": dict(learning_rate=0.1, lr_lambda=lambda e: 0.9 ** e),
    "ReduceOnPlateau": dict(learning_rate=0.1), "CosineAnnealingDecay": dict(learning_rate=0.1, T_max=4),
    "MultiplicativeDecay": dict(learning_rate=0.1, lr_lambda=lambda e: 0.9),
    "OneCycleLR": dict(max_learning_rate=0.1, total_steps=8),
    "CyclicLR": dict(base_learning_rate=0.01, max_learning_rate=0.1, step_size_up=2),
    "LinearLR": dict(learning_rate=0.1, total_steps=4), "CosineAnnealingWarmRestarts": dict(learning_rate=0.1, T_0=2),
}
OUT_OF_SCOPE = {e["framework_name"] for e in json.load(open(os.path.join(HERE, "data", "surface", "paddle.json")))
                ["entries"] if e.get("out_of_scope")}
OPTIMIZERS = [e for e in RECORD["entries"] if e["kind"] == "optimizer" and e["framework_name"] not in OUT_OF_SCOPE]
SCHEDULERS = [e for e in RECORD["entries"] if e["kind"] == "lr_scheduler"]
# the methods the face implements; every other recorded one must raise saying what to write
WORKS = {"clear_grad", "zero_grad", "get_lr", "set_lr", "state_dict", "set_state_dict", "load_state_dict", "step",
         "get_opti_var_name_list"}


def test_the_record_is_paddle_331():
    assert RECORD["version"] == "3.3.1" and len(OPTIMIZERS) >= 13 and len(SCHEDULERS) >= 17
    assert "_learning_rate" in next(e for e in OPTIMIZERS if e["framework_name"].endswith("AdamW"))[
        "private_attributes"]


@pytest.mark.parametrize("entry", OPTIMIZERS, ids=lambda e: e["framework_name"])
def test_optimizer_objects_have_the_recorded_surface(entry):
    name = entry["framework_name"].rpartition(".")[2]
    if name == "Optimizer":
        opt_cls = P.Optimizer
        for m in entry["methods"]:
            assert callable(getattr(opt_cls, m)), m
        return
    opt = getattr(P, name)(learning_rate=0.1, parameters={"w": jnp.ones((2, 2)), "b": jnp.zeros(2)})
    assert isinstance(opt, P.Optimizer)
    for m in entry["methods"]:
        fn = getattr(opt, m)
        assert callable(fn), m
        if m not in WORKS:
            with pytest.raises(NotImplementedError, match=rf"optimizer\.{m}.*: "):
                fn()
    opt.step({"w": jnp.ones((2, 2)), "b": jnp.ones(2)})
    for a in list(entry.get("attributes", {})) + list(entry.get("private_attributes", {})):
        try:
            getattr(opt, a)
        except AttributeError as e:  # none silently absent: each says what to read instead
            assert str(e).startswith(f"optimizer.{a}: "), (a, str(e))
    # Paddle's keys, up to the parameter names ('linear_1.w_0_moment1_0' there, 'w_moment1_0' here)
    want = sorted(re.sub(r"^linear_\d+\.([wb])_0_", r"\1_", k) for k in entry["state_dict_keys"] if k != "LR_Scheduler")
    assert sorted(opt.state_dict()) == want


@pytest.mark.parametrize("entry", SCHEDULERS, ids=lambda e: e["framework_name"])
def test_schedulers_have_the_recorded_surface(entry):
    name = entry["framework_name"].rpartition(".")[2]
    cls = getattr(P.lr, name)
    for m in entry["methods"]:
        assert callable(getattr(cls, m)), m
    if name not in SCHED_ARGS:
        return
    sched = cls(**SCHED_ARGS[name])
    for a in entry["attributes"]:
        getattr(sched, a)
    assert sorted(sched.state_dict()) == entry["state_dict_keys"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched.set_state_dict(sched.state_dict())
