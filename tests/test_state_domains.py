"""Loaded optimizer state is checked for meaning (issue 40 item 1): each state class declares its
fields' domains (`gradxform._domains`: second moments and squared-gradient sums >= 0 and finite,
first moments finite, step counts in [0, 2**31 - 2], running beta powers in [0, 1]), and every
loader refuses a value outside them with its documented error, naming the field, the leaf and the
value, changing nothing: `gradxform.checkpoint.load_state` (CheckpointError 'corrupt'),
``Trainer.load_states`` (its file's error; ValueError for a state tree) and the three migrate
readers (MigrateError, raised where each assembles its state: ``fill_state``).

The other half: no false positives. Every registered optimizer's fresh state, and its state after
a few steps, passes the check (tests/cases.py's rows); so does MXNet Nadam's ``m_schedule`` once it
underflows to 0 (gradxform's float32 product of momenta near 0.45 reaches 0 after ~110 updates, so a
Trainer could not reload its own checkpoint before this)."""
import io
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cases
import gradxform as gx
import quick_compile
import test_migrate_gluon as gluon
import test_migrate_mindspore as ms
from gradxform._domains import domain_error
from gradxform._state_paths import replace_fields, state_paths
from gradxform.checkpoint import CheckpointError, load_state, save_state
from gradxform.migrate import MigrateError, from_gluon_states, from_mindspore_checkpoint, from_paddle_state_dict
from gradxform.migrate import _gluon
from gradxform.trainer import Trainer

PARAMS = {"dense": {"kernel": jnp.asarray([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], jnp.float32),
                    "bias": jnp.asarray([0.1, -0.2], jnp.float32)}}
GRADS = [jax.tree.map(lambda p, k=k: jnp.sin(p * (k + 1)) - 0.3 * k, PARAMS) for k in range(3)]


# -- no false positives ------------------------------------------------------------------------

@pytest.mark.parametrize("name", cases.names())
def test_every_optimizer_passes_fresh_and_after_steps(name):
    tx = cases.create(name)
    params, state = PARAMS, tx.init(PARAMS)
    assert domain_error(state) is None
    step = quick_compile.jit(tx.update)  # values in their domains: a quick compile
    for g in GRADS:
        updates, state = step(g, state, params)
        params = gx.apply_updates(params, updates)
        assert domain_error(state) is None, name


def test_a_nadam_schedule_that_underflowed_to_0_reloads(tmp_path):
    t = Trainer({"a": jnp.ones(3)}, "nadam", {"learning_rate": 0.01}, devices=jax.devices()[:1])
    g = {"a": jnp.full((1, 3), 0.1)}  # one copy per device
    for _ in range(130):
        t.step(g, 1)
    (node,) = [n for _, n in state_paths(t.state) if hasattr(n, "m_schedule")]
    assert float(node.m_schedule) == 0.0
    t.save_states(tmp_path / "ck")
    t.load_states(tmp_path / "ck")


# -- poisoned states: the field, the leaf, the value ------------------------------------------

def _node(state, cls_name):
    return next((p, n) for p, n in state_paths(state) if type(n).__name__ == cls_name)


def _poison(state, cls_name, field, value, leaf=None):
    """``state`` with ``field`` of its ``cls_name`` node set to ``value`` at element 0 of every
    leaf (or of ``leaf``, a key path string, only)."""
    path, node = _node(state, cls_name)

    def one(kp, x):
        if leaf is not None and jax.tree_util.keystr(kp) != leaf:
            return x
        a = np.array(x)
        a.reshape(-1)[0] = value
        return a
    return replace_fields(state, {path: {field: jax.tree_util.tree_map_with_path(one, getattr(node, field))}})


POISONS = [  # optimizer, kwargs, state class, field, value, the domain named
    ("adam", {}, "MomentsState", "nu", -1.0, r"\[0, inf\)"),
    ("adam", {}, "MomentsState", "mu", np.nan, r"\(-inf, inf\)"),
    ("adam", {}, "StepState", "count", -5, r"\[0, 2147483646\]"),
    ("rmsprop", {}, "TraceState", "trace", -0.5, r"\[0, inf\)"),
    ("rmsprop", {"centered": True}, "CenteredRmsState", "n", -0.5, r"\[0, inf\)"),
    ("adagrad", {}, "TraceState", "trace", np.inf, r"\[0, inf\)"),
    ("adadelta", {}, "AdaDeltaState", "acc_g", -1.0, r"\[0, inf\)"),
    ("ftrl", {}, "MXNetFtrlState", "n", -2.0, r"\[0, inf\)"),
    ("mindspore.adam", {}, "BetaPowerState", "beta1_power", 1.5, r"\[0, 1\]"),
    ("mindspore.adam", {}, "BetaPowerState", "beta2_power", -0.1, r"\[0, 1\]"),
    ("mindspore.rmsprop", {"centered": True}, "RMSPropState", "mean_square", -1.0, r"\[0, inf\)"),
    ("mindspore.ftrl", {}, "MindSporeFtrlState", "accum", -1.0, r"\[0, inf\)"),
    ("paddle.adam", {}, "AdamState", "beta1_pow", 1.5, r"\[0, 1\]"),
    ("paddle.adam", {}, "AdamState", "moment2", -1.0, r"\[0, inf\)"),
    ("paddle.rmsprop", {"learning_rate": 0.1}, "RMSPropState", "mean_square", -1.0, r"\[0, inf\)"),
]


@pytest.mark.parametrize("name, kw, cls_name, field, value, domain", POISONS)
def test_the_checker_names_field_leaf_and_value(name, kw, cls_name, field, value, domain):
    tx = gx.create(name, **kw)
    state = tx.init(PARAMS)
    assert domain_error(state) is None
    path, node = _node(state, cls_name)
    per_leaf = jax.tree.structure(getattr(node, field)) == jax.tree.structure(PARAMS)
    leaf = "['dense']['kernel']" if per_leaf else None
    why = domain_error(_poison(state, cls_name, field, value, leaf))
    assert why is not None and why.startswith(f"{cls_name}.{field} must be in ")
    assert jax.tree_util.keystr(path + (jax.tree_util.GetAttrKey(field),)) in why
    assert f"got {value!r}" in why or (np.isnan(value) and "got nan" in why)
    if per_leaf:  # a moment names its element; a per-leaf scalar (Paddle's beta1_pow) is one value
        scalar = np.ndim(getattr(node, field)["dense"]["kernel"]) == 0
        assert "of parameter leaf ['dense']['kernel']" + ("" if scalar else ", element (0, 0)") in why
    assert __import__("re").search(domain, why)


def test_conditional_domains_follow_the_hyperparameters():
    """A TraceState is a sum of squares where it holds an epsilon (RMSProp, AdaGrad), a momentum
    (any sign) elsewhere; an RMS average with decay > 1 (MindSpore and Paddle accept it) can turn
    negative, so only finiteness is asked of it."""
    sgd = gx.create("sgd", learning_rate=0.1, momentum=0.9).init(PARAMS)
    assert domain_error(_poison(sgd, "TraceState", "trace", -3.0)) is None
    assert "TraceState.trace" in domain_error(_poison(sgd, "TraceState", "trace", np.nan))
    wild = gx.create("mindspore.rmsprop", decay=1.5).init(PARAMS)
    assert domain_error(_poison(wild, "RMSPropState", "mean_square", -1.0)) is None


# -- every loader ------------------------------------------------------------------------------

def test_load_state_refuses_a_poisoned_checkpoint(tmp_path):
    tx = gx.create("adam", learning_rate=0.1)
    state = tx.init(PARAMS)
    save_state(tmp_path / "good", state)
    load_state(tmp_path / "good", like=state)
    save_state(tmp_path / "bad", _poison(state, "MomentsState", "nu", -1.0, "['dense']['bias']"))
    with pytest.raises(CheckpointError, match=r"no run reaches: MomentsState.nu must be in \[0, inf\); got -1.0 "
                                              r"at state.*\.nu\['dense'\]\['bias'\] of parameter leaf "
                                              r"\['dense'\]\['bias'\], element \(0,\)") as err:
        load_state(tmp_path / "bad", like=state)
    assert err.value.kind == "corrupt"
    # like=None gives the raw {path: array} dict: no state classes, so no domains to check against
    assert any(np.any(np.asarray(v) < 0) for v in load_state(tmp_path / "bad").values())


def _trainer(name="adam", **kw):
    return Trainer(PARAMS, name, {"learning_rate": 0.01, **kw}, devices=jax.devices()[:1])


def _per_device(g):
    return jax.tree.map(lambda x: x[None], g)


def _snapshot(t):
    return [np.asarray(x).copy() for x in jax.tree.leaves((t.params, t.state))]


def _unchanged(t, before):
    after = [np.asarray(x) for x in jax.tree.leaves((t.params, t.state))]
    assert len(after) == len(before) and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(after, before))


@pytest.mark.parametrize("cls_name, field, value", [("MomentsState", "nu", -1.0), ("MomentsState", "mu", np.nan),
                                                    ("StepState", "count", -5)])
def test_trainer_refuses_a_poisoned_file_and_tree_and_keeps_its_state(tmp_path, cls_name, field, value):
    t = _trainer()
    t.step(_per_device(GRADS[0]), 1)
    t.save_states(tmp_path / "good")
    tree = _poison(t.state, cls_name, field, value)
    u = _trainer()
    u.step(_per_device(GRADS[1]), 1)
    before = _snapshot(u)
    with pytest.raises(ValueError, match=f"no run reaches: {cls_name}.{field} must be in "):
        u.load_states(tree)
    _unchanged(u, before)
    # the same in a checkpoint file (written as the Trainer writes them)
    save_state(tmp_path / "bad", {"params": t.params, "state": tree, "residual": []}, meta=t._meta())
    with pytest.raises(CheckpointError, match=f"{cls_name}.{field} must be in ") as err:
        u.load_states(tmp_path / "bad")
    assert err.value.kind == "corrupt"
    _unchanged(u, before)
    u.load_states(tmp_path / "good")


def test_gluon_states_with_a_negative_variance_are_refused(monkeypatch):
    def edit(states, opt):
        k = sorted(states)[0]
        mean, var = states[k]
        var = np.array(var)
        var.reshape(-1)[0] = -0.25
        states[k] = (mean, var)
    z, meta = gluon._read_edited(monkeypatch, "adam", edit)
    params, tx = gluon.params_at(z, meta, meta["k"] - 1), gluon.make_tx(meta)
    with pytest.raises(MigrateError, match=r"no run reaches: MomentsState.nu must be in \[0, inf\); got -0.25 at "
                                           r"state.*of parameter leaf"):
        from_gluon_states("x", params, tx)


def test_gluon_states_poisoned_in_a_trainer_change_nothing(monkeypatch):
    z, meta = gluon.load("adam")
    data = open(gluon.states_file("adam", meta), "rb").read()
    states, opt = _gluon.read_gluon_states(io.BytesIO(data))
    k = sorted(states)[0]
    states[k] = (states[k][0], -np.abs(np.asarray(states[k][1])) - 1)
    monkeypatch.setattr(_gluon, "read_gluon_states", lambda fname: (states, opt))
    params = gluon.params_at(z, meta, meta["k"] - 1)
    t = Trainer(params, gluon.make_tx(meta), devices=jax.devices()[:1])
    before = _snapshot(t)
    with pytest.raises(MigrateError, match="MomentsState.nu must be in"):
        t.load_states(io.BytesIO(data))
    _unchanged(t, before)


@pytest.mark.parametrize("tag, value, what", [("moment2.dense1.bias", -1.0, "MomentsState.nu"),
                                               ("moment1.dense1.bias", np.nan, "NaN or Inf"),
                                               ("beta1_power", 1.5, "BetaPowerState.beta1_power"),
                                               ("global_step", -5, "global_step is -5")])
def test_mindspore_checkpoint_poisoned(tag, value, what):
    z, meta = ms.load("adam")
    params, tx = ms.params_at(z, meta, 4), ms.make_tx(meta)
    entries = {t: z["ckpt_" + t] for t in meta["ckpt_entries"]}
    assert tag in entries
    a = np.array(entries[tag])
    a.reshape(-1)[0] = value
    with pytest.raises(MigrateError, match=what):
        from_mindspore_checkpoint(io.BytesIO(ms._encode(dict(entries, **{tag: a}))), params, tx)


@pytest.mark.parametrize("key, value, what", [("dense.bias_moment2_0", -1.0, "AdamState.moment2"),
                                               ("bn.gamma_beta2_pow_acc_0", 1.5, "AdamState.beta2_pow"),
                                               ("dense.weight_moment1_0", np.inf, "NaN or Inf")])
def test_paddle_state_dict_poisoned(key, value, what):
    from gradxform.migrate import read_paddle_state_dict  # noqa: PLC0415
    sd = read_paddle_state_dict(os.path.join(os.path.dirname(__file__), "fixtures", "paddle", "opt_adam_default.pdopt"))
    params = {"dense.weight": jnp.ones((4, 3)), "dense.bias": jnp.ones(3), "bn.gamma": jnp.ones((2, 2, 2))}
    tx = gx.paddle.adam()
    from_paddle_state_dict(sd, params, tx)
    a = np.array(sd[key])
    a.reshape(-1)[...] = value
    with pytest.raises(MigrateError, match=what):
        from_paddle_state_dict(dict(sd, **{key: a}), params, tx)


@pytest.mark.parametrize("wrap", ["guards_and_master_weights", "loss_scale", "fused"])
def test_wrapped_states_pass_after_steps(wrap):
    """The states around an optimizer's own (skip_nonfinite's counters, float32 master weights of
    float16 leaves, the dynamic loss scale, `gradxform.fused`'s flat buffers) pass too."""
    params = {"a": jnp.ones((3, 2), jnp.float16), "b": jnp.ones(2, jnp.float32)}
    if wrap == "guards_and_master_weights":
        tx = gx.create("adam", multi_precision=True, skip_nonfinite=True)
    elif wrap == "loss_scale":
        tx = gx.pieces.dynamic_loss_scale(gx.create("adam", multi_precision=True))
    else:
        params = jax.tree.map(lambda x: x.astype(jnp.float32), params)
        tx = gx.fused(gx.create("adam"))
    state = tx.init(params)
    for k in range(3):
        updates, state = tx.update(jax.tree.map(lambda x: (x * 0.3 * (k + 1)).astype(x.dtype), params), state, params)
        params = gx.apply_updates(params, updates)
    assert domain_error(state) is None
