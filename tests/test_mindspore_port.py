"""A MindSpore script ported literally (only the imports changed) gives MindSpore's numbers or fails at
once saying what to write: a group predicate that selects nothing, a list learning rate shorter than
the run, ``optimizer.get_lr()``, a dynamic weight decay, MindSpore's ``learning_rate_schedule`` and
``dynamic_lr`` modules, and resuming a checkpoint with other learning rates than the run's."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform
import gradxform.mindspore as nn
import cases
import gradxform.schedules as S
from gradxform.migrate import from_mindspore_checkpoint

PARAMS = {"dense1": {"weight": jnp.ones((8, 4)), "bias": jnp.ones(8)},
          "dense2": {"weight": jnp.ones((3, 8)), "bias": jnp.ones(3)}}
FIXTURES = Path(__file__).parent / "fixtures" / "mindspore"


# --- a group predicate that selects nothing --------------------------------------------------------

def _dotted_groups():
    # MindSpore's parameter names ('dense1.bias'); gradxform's are 'dense1/bias'
    return [{"params": lambda x: "weight" in x.name, "weight_decay": 0.01},
            {"params": lambda x: "dense1.bias" in x.name, "lr": 0.01},
            {"params": lambda x: "dense2/bias" in x.name}]


@pytest.mark.parametrize("with_order", [False, True])
def test_a_group_predicate_that_selects_nothing_is_refused_naming_the_names(with_order):
    groups = _dotted_groups() + ([{"order_params": gradxform.param_names(PARAMS)}] if with_order else [])
    tx = nn.Adam(groups, learning_rate=0.02)
    with pytest.raises(ValueError) as err:
        tx.init(PARAMS)
    msg = str(err.value)
    assert "group 1 'params' is a predicate that selects no parameter" in msg, msg
    assert "must not be empty" in msg and "order_params" not in msg, msg
    for name in gradxform.param_names(PARAMS):
        assert repr(name) in msg, msg
    # an example made from the names themselves
    assert "lambda x: 'dense1/bias' in x.name where MindSpore has 'dense1.bias' in x.name" in msg, msg


def test_group_predicates_that_select_parameters_still_train():
    groups = _dotted_groups()
    groups[1]["params"] = lambda x: "dense1/bias" in x.name
    tx = nn.Adam(groups, learning_rate=0.02)
    s = tx.init(PARAMS)
    u, _ = tx.update(PARAMS, s, PARAMS)
    assert all(float(jnp.abs(leaf).max()) > 0 for leaf in jax.tree.leaves(u))


def test_paddle_still_takes_a_group_of_no_parameters():
    tx = gradxform.paddle.SGD(learning_rate=0.1, parameters=[{"params": []}, {"params": ["dense1/weight"]}])
    s = tx.init(PARAMS)
    u, _ = tx.update(PARAMS, s, PARAMS)
    assert float(jnp.abs(u["dense1"]["weight"]).max()) > 0 and float(jnp.abs(u["dense2"]["weight"]).max()) == 0


# --- a list learning rate shorter than the run -----------------------------------------------------

def _sgd_run(lr, steps, step_fn):
    p, g = {"w": jnp.ones((3,))}, {"w": jnp.ones((3,))}
    tx = nn.SGD(None, learning_rate=lr)
    s = tx.init(p)
    for _ in range(steps):
        p, s = step_fn(tx, p, s, g)
    return tx, p, s


def _eager(tx, p, s, g):
    u, s = tx.update(g, s, p)
    return gradxform.apply_updates(p, u), s


def test_an_eager_update_past_the_end_of_the_list_raises_naming_its_length():
    tx, p, s = _sgd_run([0.1, 0.2, 0.3], 3, _eager)
    np.testing.assert_allclose(np.asarray(p["w"]), 1 - 0.6, rtol=1e-6)  # the three values, as MindSpore
    with pytest.raises(ValueError, match=r"learning_rate=\[\.\.\.\]\): the list holds 3 values.*update 4 "
                                         r"reads index 3.*as long as the run"):
        tx.update({"w": jnp.ones((3,))}, s, p)


def test_get_lr_past_the_end_raises_and_reads_each_value_before_it():
    tx, p, s = _sgd_run([0.1, 0.2, 0.3], 2, _eager)
    assert nn.get_lr(tx, s) == pytest.approx(0.3) == tx.get_lr(s)
    _, s = _eager(tx, p, s, {"w": jnp.ones((3,))})
    with pytest.raises(ValueError, match="the list holds 3 values"):
        nn.get_lr(tx, s)
    with pytest.raises(ValueError, match="the list holds 3 values"):
        tx.get_lr(s)
    # MindSpore's get_lr_parameter returns the list's Parameter (reads no element): here its last value
    assert tx.get_lr_parameter(s, "w") == nn.get_lr_parameter(tx, s, "w") == pytest.approx(0.3)


def test_a_jitted_update_past_the_end_reads_the_last_value():
    # nothing can raise inside jit (a raising callback would lose the donated parameters)
    step = jax.jit(_eager, static_argnums=0)
    _, p, _ = _sgd_run([0.1, 0.2, 0.3], 5, step)
    np.testing.assert_allclose(np.asarray(p["w"]), 1 - (0.1 + 0.2 + 0.3 + 0.3 + 0.3), rtol=1e-6)


def test_a_group_lr_list_past_its_end_raises_naming_the_group():
    groups = [{"params": "dense1/*", "lr": [0.1, 0.2]}, {"params": "dense2/*"}]
    tx = nn.Momentum(groups, 0.1, 0.9)
    s = tx.init(PARAMS)
    for _ in range(2):
        _, s = tx.update(PARAMS, s, PARAMS)
    with pytest.raises(ValueError, match=r"groups\[0\]\['lr'\]=\[\.\.\.\]: the list holds 2 values"):
        tx.update(PARAMS, s, PARAMS)


def test_the_shared_list_schedule_keeps_its_last_value_and_the_mindspore_one_raises_on_the_host():
    values = [0.3, 0.2, 0.1]
    np.testing.assert_allclose(np.asarray(S.DynamicLR(values).lr_for_update(jnp.arange(1, 7))),
                               [0.3, 0.2, 0.1, 0.1, 0.1, 0.1])
    from gradxform.schedules.internal import MindSporeListLR  # noqa: PLC0415

    ms = MindSporeListLR(values, what="lr")
    assert isinstance(ms, S.DynamicLR)
    np.testing.assert_allclose(np.asarray(ms.lr_for_update(jnp.arange(1, 4))), values)
    with pytest.raises(ValueError, match="lr: the list holds 3 values"):
        ms.lr_for_update(jnp.arange(1, 5))
    traced = jax.jit(ms.lr_for_update)(jnp.arange(1, 7))  # traced: the last value past the end
    np.testing.assert_allclose(np.asarray(traced), [0.3, 0.2, 0.1, 0.1, 0.1, 0.1])


# --- optimizer.get_lr() ----------------------------------------------------------------------------

def test_get_lr_is_a_method_that_takes_the_state():
    tx = nn.Momentum(None, [0.1, 0.05, 0.01], 0.9)
    assert isinstance(tx, optax.GradientTransformationExtraArgs)
    s = tx.init(PARAMS)
    _, s = tx.update(PARAMS, s, PARAMS)
    assert tx.get_lr(s) == nn.get_lr(tx, s) == pytest.approx(0.05)
    assert tx.get_lr_parameter(s, "dense1/bias") == pytest.approx(0.05)
    with pytest.raises(TypeError, match=r"opt\.get_lr\(state\)"):
        tx.get_lr()
    with pytest.raises(TypeError, match=r"opt\.get_lr_parameter\(state, param\)"):
        tx.get_lr_parameter("dense1/bias")


def test_the_optimizer_stays_an_ordinary_pytree_with_its_methods():
    tx = nn.Adam([{"params": "dense1/*", "lr": 0.01}, {"params": "dense2/*"}], learning_rate=0.02)
    rebuilt = jax.tree.map(lambda f: f, tx)
    assert type(rebuilt) is type(tx) and rebuilt == tx
    wrapped = tx._replace(update=lambda u, s, p=None, **kw: tx.update(u, s, p, **kw))
    s = wrapped.init(PARAMS)
    assert wrapped.get_lr(s) == rebuilt.get_lr(s) == pytest.approx((0.01, 0.02))


# --- a dynamic weight decay ------------------------------------------------------------------------

def test_a_weight_decay_cell_says_what_to_write():
    with pytest.raises(TypeError, match=r"weight_decay must be a float or int.*at global_step 0 \(0\).*"
                                        r"gradxform\.set_hyper\(state, weight_decay=value\)"):
        nn.Momentum(None, 0.1, 0.9, weight_decay=nn.WarmUpLR(0.01, 4))
    with pytest.raises(TypeError, match=r"groups\[0\]\)\(weight_decay=.*set_hyper\(state, group=0, weight_decay=value\)"):
        nn.Momentum([{"params": "dense1/*", "weight_decay": nn.WarmUpLR(0.01, 4)}], 0.1, 0.9)


def test_set_hyper_changes_the_weight_decay_between_updates():
    tx = nn.Momentum(None, 0.1, 0.9, weight_decay=0.0)
    s = tx.init(PARAMS)
    s = gradxform.set_hyper(s, weight_decay=0.0025)
    assert float(gradxform.get_hyper(s, "weight_decay")) == pytest.approx(0.0025)


# --- MindSpore's modules ---------------------------------------------------------------------------

def test_mindspores_schedule_modules_import_as_written():
    from gradxform.mindspore.dynamic_lr import warmup_lr  # noqa: PLC0415
    from gradxform.mindspore.learning_rate_schedule import (LearningRateSchedule,  # noqa: PLC0415
                                                            PolynomialDecayLR, WarmUpLR)

    assert nn.learning_rate_schedule.CosineDecayLR is nn.CosineDecayLR is S.CosineDecayLR
    assert (WarmUpLR, PolynomialDecayLR, LearningRateSchedule) == (nn.WarmUpLR, nn.PolynomialDecayLR,
                                                                   nn.LearningRateSchedule)
    assert warmup_lr is nn.warmup_lr is nn.dynamic_lr.warmup_lr
    # MindSpore 2.10.0's __all__ of mindspore.nn.learning_rate_schedule and mindspore.nn.dynamic_lr
    assert nn.learning_rate_schedule.__all__ == ["ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR",
                                                 "CosineDecayLR", "PolynomialDecayLR", "WarmUpLR"]
    assert nn.dynamic_lr.__all__ == ["piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr",
                                     "inverse_decay_lr", "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr"]
    for module in (nn.learning_rate_schedule, nn.dynamic_lr):
        assert all(getattr(module, n) is getattr(nn, n) for n in module.__all__)


# --- resuming with other learning rates than the run's ---------------------------------------------

def _fixture_params(case):
    import json  # noqa: PLC0415

    z = np.load(FIXTURES / case / "trajectory.npz")
    meta = json.loads(str(z["meta"]))
    return {n: jnp.asarray(z["p_4_" + n]) for n in meta["names"]}


def _resume_warnings(case, tx):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        from_mindspore_checkpoint(FIXTURES / case / "opt.ckpt", _fixture_params(case), tx)
    return [str(r.message) for r in rec if "differ from the saved run's" in str(r.message)]


def _file_lr(case):
    from gradxform.migrate import read_mindspore_checkpoint  # noqa: PLC0415

    return np.asarray(read_mindspore_checkpoint(FIXTURES / case / "opt.ckpt")["learning_rate"], np.float32)


def test_resuming_with_the_runs_lr_list_does_not_warn():
    lr = [float(v) for v in _file_lr("adam_lr_list")]
    assert _resume_warnings("adam_lr_list", nn.Adam(None, learning_rate=lr)) == []


@pytest.mark.parametrize("other", ["scaled", "longer", "fixed"])
def test_resuming_with_another_lr_list_or_a_fixed_rate_warns(other):
    lr = [float(v) for v in _file_lr("adam_lr_list")]
    given = {"scaled": [2 * v for v in lr], "longer": lr + [lr[-1]], "fixed": lr[0]}[other]
    got = _resume_warnings("adam_lr_list", nn.Adam(None, learning_rate=given))
    assert len(got) == 1 and f"vs file a list of {len(lr)}" in got[0], got


def test_resuming_with_another_group_lr_warns_naming_the_group(tmp_path):
    # a run of groups saves each group's own rate as learning_rate_group_<i> (MindSpore's names)
    from gradxform.migrate import read_mindspore_checkpoint  # noqa: PLC0415
    from gradxform.migrate._mindspore import _warn_run_mismatch  # noqa: PLC0415

    ckpt = dict(read_mindspore_checkpoint(FIXTURES / "adam_lr_list" / "opt.ckpt"))
    ckpt["learning_rate_group_1"] = np.asarray(0.01, np.float32)
    lr = [float(v) for v in _file_lr("adam_lr_list")]
    params = _fixture_params("adam_lr_list")
    names = gradxform.param_names(params)
    for group_lr, want in ((0.01, None), (0.02, "learning_rate_group_1: tx 0.02 vs file 0.01")):
        tx = nn.Adam([{"params": names[:1]}, {"params": names[1:], "lr": group_lr}], learning_rate=lr)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            _warn_run_mismatch(ckpt, tx, tx.init(params))
        said = [str(r.message) for r in rec]
        assert (said == []) if want is None else (len(said) == 1 and want in said[0]), said


def test_get_lr_parameter_refuses_a_name_the_optimizer_does_not_hold():
    # MindSpore raises "For 'get_lr_parameter', the parameter ... is not in optimizer"; the default rate for
    # MindSpore's dotted name of a grouped parameter would be a wrong number
    params = {"dense": {"weight": jnp.ones((2, 2)), "bias": jnp.zeros(2)}}
    opt = gradxform.mindspore.Momentum([{"params": "dense/weight", "lr": 0.5}, {"params": "dense/bias"}], 0.1, 0.9)
    state = opt.init(params)
    assert opt.get_lr_parameter(state, "dense/weight") == np.float32(0.5)
    assert opt.get_lr_parameter(state, "dense/bias") == np.float32(0.1)
    for name in ("dense.weight", "nonexistent"):
        with pytest.raises(ValueError, match=rf"'{name}' is not in the optimizer.*'dense/weight' where MindSpore"):
            opt.get_lr_parameter(state, name)


@pytest.mark.parametrize("attr, says", [("learning_rate", r"opt.get_lr\(state\)"), ("global_step", "step count"),
                                        ("weight_decay", "get_hyper"), ("parameters", "param_names")])
def test_a_mindspore_optimizer_attribute_says_where_it_lives_here(attr, says):
    opt = gradxform.mindspore.Momentum(None, 0.1, 0.9)
    with pytest.raises(AttributeError, match=rf"optimizer.{attr}: MindSpore's optimizer Cell attribute.*{says}"):
        getattr(opt, attr)
    assert not hasattr(opt, attr)


@pytest.mark.parametrize("name", [n for n in cases.names() if n.startswith("mindspore.")])
def test_calling_the_optimizer_as_mindspore_2_does_says_what_to_write(name):
    # MindSpore 2's training step ends with `optimizer(grads)`, the Cell writing its Parameters in place
    opt = cases.create(name)
    with pytest.raises(TypeError, match=re.escape("updates, state = opt.update(grads, state, params); params = "
                                                  "optax.apply_updates(params, updates)")):
        opt({"w": jnp.ones(2)})
