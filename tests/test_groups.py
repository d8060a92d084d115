"""Parameter groups (gradxform.mindspore._groups) through gradxform.mindspore.momentum:
per-group lr (fixed and list), weight decay, the beta/gamma filter, order_params,
ungrouped parameters frozen, and the errors. NumPy reference, 10 steps, rtol 1e-6."""
import re

import jax.numpy as jnp
import numpy as np
import chex
import pytest

import gradxform as gx
import cases
from trajectories import run_jitted
from gradxform import mindspore as M
from gradxform.mindspore._groups import beta_gamma_filter

SHAPES = {"conv/weight": (4, 16, 1, 2), "dense/bias": (3,), "bn/gamma": (2, 2)}


def setup(seed=0):
    rng = np.random.default_rng(seed)
    w0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    gs = [{k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()} for _ in range(10)]
    return w0, gs


run = run_jitted


def momentum_ref(w0, gs, lr_of, wd_of, gc=()):
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(gs):
        for k in w:
            gg = g[k] + wd_of(k) * w[k]
            if k in gc:
                gg = gg - gg.mean(axis=tuple(range(1, gg.ndim)), keepdims=True)
            v[k] = 0.9 * v[k] + gg
            w[k] = w[k] - lr_of(k, t) * v[k]
    return w


def test_beta_gamma_filter():
    assert beta_gamma_filter("dense/weight") and not beta_gamma_filter("bn/gamma") and not beta_gamma_filter("ln/beta")


def test_default_filter_without_groups():
    w0, gs = setup()
    got, _ = run(M.momentum(0.1, 0.9, weight_decay=0.05), w0, gs)
    want = momentum_ref(w0, gs, lambda k, t: 0.1, lambda k: 0.0 if "gamma" in k else 0.05)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)


def test_groups_lr_list_weight_decay_gc_and_order():
    w0, gs = setup()
    lrs = [0.05, 0.04, 0.03]
    groups = [{"params": "conv/*", "lr": lrs, "weight_decay": 0.01, "grad_centralization": True},
              {"params": lambda n: not n.startswith("conv")},
              {"order_params": ["dense/bias", "conv/weight", "bn/gamma"]}]
    tx = M.momentum(0.1, 0.9, weight_decay=0.02, groups=groups)
    got, state = run(tx, w0, gs)
    want = momentum_ref(w0, gs, lambda k, t: lrs[min(t, 2)] if k.startswith("conv") else 0.1,
                        lambda k: 0.01 if k.startswith("conv") else 0.02, gc=("conv/weight",))
    for k in want:  # with groups, bn/gamma IS decayed (MindSpore ignores the name filter there)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)
    assert {"learning_rate_groups", "weight_decay_groups", "weight_decay"} <= set(gx.hyper_names(state))
    assert float(gx.get_hyper(state, "weight_decay", group=0)) == np.float32(0.01)


def test_group_hyperparameters_settable():
    w0, gs = setup()
    tx = M.momentum(0.1, 0.9, groups=[{"params": ["dense/bias"], "lr": 0.5}, {"params": ["conv/weight", "bn/gamma"]}])
    _, state = run(tx, w0, gs[:1])
    state = gx.set_hyper(state, group=0, learning_rate=0.0)
    p = {k: jnp.asarray(v) for k, v in w0.items()}
    u, _ = tx.update({k: jnp.asarray(v) for k, v in gs[1].items()}, state, p)
    assert np.all(np.asarray(u["dense/bias"]) == 0) and np.any(np.asarray(u["bn/gamma"]) != 0)


def test_ungrouped_parameters_are_not_optimized():
    w0, gs = setup()
    got, _ = run(M.momentum(0.1, 0.9, groups=[{"params": "dense/*"}]), w0, gs)
    np.testing.assert_array_equal(got["bn/gamma"], w0["bn/gamma"])
    assert not np.array_equal(got["dense/bias"], w0["dense/bias"])


@pytest.mark.parametrize("groups, exc, match", [
    ([{"params": "nothing*"}], ValueError, "matches no parameter"),
    ([{"params": "dense/*"}, {"params": ["dense/bias"]}], ValueError, "only once"),
    ([{"params": "dense/*"}, {"order_params": ["dense/bias", "bn/gamma"]}], ValueError, "order_params"),
])
def test_group_errors_at_init(groups, exc, match):
    tx = M.momentum(0.1, 0.9, groups=groups)
    with pytest.raises(exc, match=match):
        tx.init({k: jnp.zeros(s) for k, s in SHAPES.items()})


@pytest.mark.parametrize("groups, exc, match", [
    ([{"params": "a", "beta": 1}], ValueError, "unknown key"),
    ([{"params": 3}], TypeError, "params"),
    ([{"params": "a", "weight_decay": -1.0}], ValueError, "weight_decay"),
    ([{"params": "a", "grad_centralization": 1}], TypeError, "grad_centralization"),
    ([{"order_params": ["a"], "lr": 0.1}], ValueError, "must hold only that key"),
    ([{"params": "a"}, {"order_params": 5}], TypeError, "order_params must be a list"),
    ([{"params": "a"}, {"order_params": "a"}], TypeError, "order_params must be a list"),
    (["a"], TypeError, "dict"),
    ([], TypeError, "groups"),
])
def test_group_errors_at_construction(groups, exc, match):
    with pytest.raises(exc, match=match):
        M.momentum(0.1, 0.9, groups=groups)


def test_gc_skips_what_mindspore_skips():
    # MindSpore 2.x: rank >= 2 with shape[1] % 16 == 0 is centralized, the rest is skipped
    # silently (issue 15 item 5; gradients in tests/test_centralization.py)
    tx = M.momentum(0.1, 0.9, groups=[{"params": "*", "grad_centralization": True}])
    p = {"conv/weight": jnp.ones((4, 3, 2, 2)), "dense/bias": jnp.ones(3), "bn/gamma": jnp.ones((2, 2))}
    g = {k: jnp.arange(v.size, dtype=jnp.float32).reshape(v.shape) for k, v in p.items()}
    u, _ = tx.update(g, tx.init(p), p)
    for k in p:  # nothing qualifies: plain momentum, -lr * g
        np.testing.assert_allclose(np.asarray(u[k]), -0.1 * np.asarray(g[k]), rtol=1e-6)


class _Param:  # a parameter object as net.trainable_params() hands it out
    def __init__(self, name):
        self.name = name


def test_params_as_mindspore_takes_them():
    """MindSpore's first argument (``optimizer.py`` ``Optimizer.__init__``, 2.10): a list of group dicts
    or of Parameters; ``_parameters_base_check`` refuses an empty list and ``all(isinstance(x, Parameter))
    ... or all(isinstance(x, dict))`` a mixed one (TypeError). gradxform also takes names and the pytree
    itself (every parameter: gradxform sees them at ``init``) beside ``groups=``."""
    from gradxform.mindspore._common import params_as_groups as pag
    groups = [{"params": ["a"], "lr": 0.1}, {"params": ["b"]}]
    assert pag("o", groups) == groups and pag("o", tuple(groups)) == groups
    assert pag("o", [_Param("a"), _Param("b")]) == [{"params": ["a", "b"]}]
    assert pag("o", ["a", _Param("b")]) == [{"params": ["a", "b"]}]
    for tree in ({"w": np.ones(2)}, {}, np.ones(3), np.ones(()), [np.ones(2), np.ones(3)]):
        assert pag("o", tree) is None and pag("o", tree, groups) is groups   # the pytree: groups= decides
    assert pag("o", None, groups) is groups
    with pytest.raises(TypeError, match="not both"):
        pag("o", [_Param("a")], groups)
    with pytest.raises(ValueError, match="must not be empty"):
        pag("o", [])
    for mixed in ([groups[0], _Param("b")], [_Param("b"), groups[0]], [groups[0], "b"]):
        with pytest.raises(TypeError, match="every element must be a group dict"):
            pag("o", mixed)
    with pytest.raises(TypeError, match="the parameters come first"):
        pag("mindspore.momentum", 0.1)


def test_gc_only_in_gc_groups_rank_two_and_up_and_never_ungrouped():
    """MindSpore 2.10 ``optimizer.py`` 889-900 (``_tensor_apply_grad_centralization``): a gradient of a
    group with grad_centralization=True is centralized (over axes 1..) when its rank is >= 2 and
    ``shape[1] % 16 == 0``; a rank-1 gradient there is left as it is; a group without the flag is never
    centralized, whatever its shape, nor is a parameter in no group (not optimized at all). The rule
    alone, in pure Python (the centralized numbers: test_groups_lr_list_weight_decay_gc_and_order)."""
    from gradxform.mindspore._common import _ms_gc_select
    from gradxform.mindspore._groups import parse_groups
    specs, _ = parse_groups("o", [{"params": "gc/*", "grad_centralization": True}, {"params": "plain/*"}])
    select = _ms_gc_select("o", specs)
    cases = {("gc/w", (2, 16)): True, ("gc/w", (3, 32, 1)): True, ("gc/w", (2, 0)): True,
             ("gc/w", (2, 17)): False, ("gc/w", (2, 15)): False, ("gc/w", (16, 2)): False,
             ("gc/b", (16,)): False, ("gc/b", ()): False,
             ("plain/w", (2, 16)): False, ("free/w", (2, 16)): False}
    assert {k: select(*k) for k in cases} == cases


def test_no_groups_state_and_the_decay_of_an_undecayed_leaf():
    """Without groups every leaf's ``group_slot`` is -1, "in no group" (`GroupState`; a checkpoint and a
    migrated MindSpore state hold that value); a leaf the filter leaves undecayed ('gamma': MindSpore's
    ``decay_weight`` returns its gradient unchanged) keeps its gradient bit for bit, a -0.0 included."""
    from gradxform.mindspore._groups import GroupState, group_weight_decay
    p = {"bn/gamma": jnp.asarray([1.0, 2.0]), "dense/w": jnp.asarray([1.0, 2.0])}
    g = {"bn/gamma": jnp.asarray([-0.0, 0.5]), "dense/w": jnp.asarray([-0.0, 0.5])}
    piece = group_weight_decay("o", 0.25, None, None, loss_scale=2.0)
    state = piece.init(p)
    assert isinstance(state, GroupState)
    assert np.asarray(state.group_slot).tolist() == [-1, -1]  # one int32 vector, an entry per leaf
    u, _ = piece.update(g, state, p)
    got = np.asarray(u["bn/gamma"])
    assert np.signbit(got[0]) and got[0] == 0 and got[1] == 0.5
    np.testing.assert_array_equal(np.asarray(u["dense/w"]), [0.25 * 2.0 * 1.0, 0.5 + 0.25 * 2.0 * 2.0])


def test_ungrouped_frozen_where_the_chain_holds_one_group_state():
    """A chain without a decay piece (AdaFactor's: its decay is inside its rule) holds one `GroupState`,
    the learning rate's; the ungrouped parameter still gets update 0 (MindSpore: not in the optimizer).
    Built as `MSOptions.build` builds AdaFactor, around plain SGD (cheaper than AdaFactor's rule)."""
    from gradxform.mindspore._common import parse
    from gradxform.pieces import scale_by_lr
    tx = parse("mindspore.adafactor", 0.5, 0.0, 1.0, [{"params": "a/*"}]).build(scale_by_lr())
    p = {"a/w": jnp.ones(2), "b/w": jnp.ones(2)}
    u, _ = tx.update({"a/w": jnp.full(2, 0.5), "b/w": jnp.full(2, 0.5)}, tx.init(p), p)
    np.testing.assert_array_equal(np.asarray(u["a/w"]), [-0.25, -0.25])
    np.testing.assert_array_equal(np.asarray(u["b/w"]), [0.0, 0.0])


def test_an_empty_group_is_refused_as_mindspore_refuses_it():
    # MindSpore nn.Optimizer._check_group_params: "Optimizer got an empty group parameter list."
    with pytest.raises(ValueError, match="empty group parameter list"):
        gx.create("mindspore.momentum", params=[{"params": []}, {"params": ["a"]}], learning_rate=0.1,
                         momentum=0.9).init({"a": jnp.ones(2)})


PADDLE_NAMES = [n for n in cases.names() if n.startswith("paddle.")]


@pytest.mark.parametrize("name", PADDLE_NAMES)
def test_an_empty_paddle_group_is_taken_and_changes_nothing(name):
    # Paddle's Optimizer._add_param_group takes {'params': []} (a config builds one when a filter
    # matches nothing): a group of no parameters, whose options apply to nothing
    params = {"a": jnp.array([0.5, -1.0]), "b": jnp.array([2.0, 0.25, -0.5])}
    grads = {"a": jnp.array([0.1, 0.2]), "b": jnp.array([-0.3, 0.4, 0.05])}
    with_empty = cases.create(name, parameters=[{"params": ["a"]}, {"params": [], "learning_rate": 0.5},
                                                 {"params": ["b"]}])
    without = cases.create(name, parameters=[{"params": ["a"]}, {"params": ["b"]}])
    got, _ = with_empty.update(grads, with_empty.init(params), params)
    want, _ = without.update(grads, without.init(params), params)
    for k in params:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name} {k}")


def test_group_keyword_sets_and_reads_a_groups_own_hyperparameters():
    """Issue 37 item 2: ``set_hyper(state, group=k, name=v)`` writes group k's entry of
    ``name_groups``, in MindSpore and Paddle groups alike; ``get_hyper(..., group=k)`` reads what
    the group's leaves use."""
    w0, gs = setup()
    tx = M.momentum(0.1, 0.9, groups=[{"params": ["dense/bias"], "lr": 0.5}, {"params": ["conv/weight", "bn/gamma"]}])
    _, state = run(tx, w0, gs[:1])
    by_group = gx.set_hyper(state, group=0, learning_rate=0.0)
    chex.assert_trees_all_equal(by_group, gx.set_hyper(state, learning_rate_groups=jnp.zeros(1)))
    assert float(gx.get_hyper(by_group, "learning_rate", group=0)) == 0.0
    assert float(gx.get_hyper(by_group, "learning_rate", group=1)) == np.float32(0.1)  # the optimizer's
    with pytest.raises(KeyError, match=r"group 1 sets no learning_rate of its own.*Groups with their own "
                                       r"learning_rate: \[0\]"):
        gx.set_hyper(state, group=1, learning_rate=0.2)
    params = {"a": jnp.ones(3), "b": jnp.ones(2)}
    paddle = gx.create("paddle.adam", parameters=[{"params": ["a"], "beta1": 0.8}, {"params": ["b"]}])
    p_state = paddle.init(params)
    chex.assert_trees_all_equal(gx.set_hyper(p_state, group=0, beta1=0.7), gx.set_hyper(p_state, beta1_groups=[0.7]))
    with pytest.raises(KeyError, match=re.escape("written set_hyper(state, group=0, beta1=...)")):
        gx.set_hyper(p_state, beta1_group_0=0.7)  # the former spelling says what to type
    with pytest.raises(ValueError, match="no parameter groups"):
        gx.set_hyper(gx.create("mxnet.adam").init(params), group=0, beta1=0.7)
    with pytest.raises(TypeError, match="an int >= 0"):
        gx.get_hyper(p_state, "beta1", group="0")
