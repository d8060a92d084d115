"""A Paddle script ported literally gives Paddle's numbers or fails at once saying what to type:

* groups of bare arrays (``[{'params': [w1, b1]}, {'params': [w2, b2]}]``) are two groups, each
  clipped on its own (``group_clip_arrays.npz``, Paddle 3.3.1); mixed or overlapping forms refuse;
* groups of a model's sub-trees (``{'params': params['fc1']}``) refuse with the full-name form, which works;
* a ReduceOnPlateau run resumes from Paddle's ``.pdopt`` and from ``opt.state_dict()``
  (``plateau_resume.pdopt``/``.npz``, Paddle 3.3.1, tools/paddle_port_fixtures.py);
* ``opt.set_state_dict(path, names=...)`` maps a port's names to Paddle's, and the error without it
  lists the file's keys and says where to pass ``names``;
* ``ScheduleRestartError`` says what its count is;
* AdamW refuses a group ``weight_decay`` that is not a number, as Paddle's ``adamw_``.
"""
from __future__ import annotations

import json
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradxform import paddle as P
from gradxform.migrate import MigrateError, from_paddle_state_dict, read_paddle_state_dict
from gradxform.paddle import lr
from gradxform.paddle.regularizer import L1Decay, L2Decay

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "paddle")
RTOL, ATOL = 1e-5, 1e-6


# -- groups of bare arrays: Paddle's clip per group -------------------------------------------------

def _group_fixture():
    z = np.load(os.path.join(FIX, "group_clip_arrays.npz"))
    return z, json.loads(str(z["meta"]))


def _mlp_loss(p, x, y):
    (w1, b1), (w2, b2) = p
    return jnp.mean((jnp.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)


def _arrays(z):
    return [jnp.asarray(z[f"p0_{i}"]) for i in range(4)]


def _build(spec, parameters):
    cls = getattr(P, spec["optimizer"])
    return cls(parameters=parameters, grad_clip=P.ClipGradByGlobalNorm(0.1), **spec["kwargs"])


@pytest.mark.parametrize("case", ["sgd", "momentum_lr"])
def test_groups_of_bare_arrays_clip_each_group_as_paddle(case):
    z, meta = _group_fixture()
    spec = meta["cases"][case]
    w1, b1, w2, b2 = _arrays(z)
    extra = spec["group_extra"]
    opt = _build(spec, [dict(extra[0], params=[w1, b1]), dict(extra[1], params=[w2, b2])])
    assert isinstance(opt, P.Optimizer)
    assert jax.tree.structure(opt.parameters) == jax.tree.structure([[0, 0], [0, 0]])
    assert [len(g["params"]) for g in opt._param_groups] == [2, 2]
    assert [g["learning_rate"] for g in opt._param_groups] == [extra[0].get("learning_rate", 1.0), 1.0]
    x, y = jnp.asarray(z["x"]), jnp.asarray(z["y"])
    for t in range(meta["steps"]):
        opt.step(jax.grad(_mlp_loss)(opt.parameters, x, y))
        for i, got in enumerate(jax.tree.leaves(opt.parameters)):
            np.testing.assert_allclose(np.asarray(got), z[f"{case}_p_{t}_{i}"], rtol=RTOL, atol=ATOL,
                                       err_msg=f"step {t} parameter {i}")


def test_groups_of_named_arrays_alone_are_groups_too():
    """Group dicts holding only named arrays (no other key) were one pytree, one clip, as the bare ones."""
    z, meta = _group_fixture()
    w1, b1, w2, b2 = _arrays(z)
    opt = _build(meta["cases"]["sgd"], [{"params": {"l1": {"w": w1, "b": b1}}}, {"params": {"l2": {"w": w2, "b": b2}}}])
    assert len(opt._param_groups) == 2 and sorted(opt.parameters) == ["l1", "l2"]

    def loss(p, x, y):
        return _mlp_loss([[p["l1"]["w"], p["l1"]["b"]], [p["l2"]["w"], p["l2"]["b"]]], x, y)

    x, y = jnp.asarray(z["x"]), jnp.asarray(z["y"])
    for t in range(meta["steps"]):
        opt.step(jax.grad(loss)(opt.parameters, x, y))
        for i, (layer, k) in enumerate([("l1", "w"), ("l1", "b"), ("l2", "w"), ("l2", "b")]):
            np.testing.assert_allclose(np.asarray(opt.parameters[layer][k]), z[f"sgd_p_{t}_{i}"], rtol=RTOL,
                                       atol=ATOL, err_msg=f"step {t} {layer}/{k}")


def test_the_group_fixture_tells_per_group_clip_from_one_global_clip():
    """One group over all four arrays (a global norm over everything) misses Paddle's numbers:
    the test above can fail."""
    z, meta = _group_fixture()
    w1, b1, w2, b2 = _arrays(z)
    one = _build(meta["cases"]["sgd"], [[w1, b1], [w2, b2]])  # a plain pytree: one group
    one.step(jax.grad(_mlp_loss)(one.parameters, jnp.asarray(z["x"]), jnp.asarray(z["y"])))
    worst = max(float(np.abs(np.asarray(a) - z[f"sgd_p_0_{i}"]).max())
                for i, a in enumerate(jax.tree.leaves(one.parameters)))
    assert worst > 1e-4


def test_a_group_of_one_array_and_an_empty_group_bind_by_position():
    w1, b1 = jnp.ones((2, 3)), jnp.zeros(3)
    opt = P.SGD(0.5, parameters=[{"params": w1}, {"params": [b1]}, {"params": []}])
    assert jax.tree.structure(opt.parameters) == jax.tree.structure([[0], [0], []])
    opt.step([[jnp.ones((2, 3))], [jnp.ones(3)], []])
    np.testing.assert_array_equal(np.asarray(opt.parameters[0][0]), np.full((2, 3), 0.5, np.float32))
    np.testing.assert_array_equal(np.asarray(opt.parameters[1][0]), np.full(3, -0.5, np.float32))


def test_bare_and_named_groups_together_say_to_use_one_form():
    w1, b1, w2 = jnp.ones((2, 3)), jnp.zeros(3), jnp.ones((3, 1))
    with pytest.raises(TypeError, match=r"parameters\[0\]\['params'\].*same form.*\{'params': \[w1, b1\]\}"):
        P.Momentum(0.1, parameters=[{"params": [w1, b1]}, {"params": {"fc2/weight": w2}}])


def test_one_array_in_two_groups_is_paddles_overlap_error():
    w1, b1 = jnp.ones((2, 3)), jnp.zeros(3)
    with pytest.raises(ValueError, match=r"more than one parameter group.*parameters\[1\]\['params'\]\[0\] is the "
                                         r"same array as parameters\[0\]\['params'\]\[1\]"):
        P.SGD(0.1, parameters=[{"params": [w1, b1]}, {"params": [b1]}])
    with pytest.raises(ValueError, match="more than one parameter group"):
        P.SGD(0.1, parameters=[{"params": {"w": w1}}, {"params": {"w": w1}}])


# -- groups of sub-trees ------------------------------------------------------------------------------

def _mlp_params():
    return {"fc1": {"weight": jnp.full((3, 4), 0.5), "bias": jnp.zeros(4)},
            "fc2": {"weight": jnp.full((4, 1), -0.25), "bias": jnp.ones(1)}}


def test_sub_tree_groups_say_to_give_full_names_and_that_form_works():
    params = _mlp_params()
    with pytest.raises(ValueError, match=r"groups 0 and 1 both name a parameter 'bias'.*\{'params': \{'fc1': "
                                         r"params\['fc1'\]\}\}"):
        P.AdamW(0.01, parameters=[{"params": params["fc1"], "learning_rate": 0.5}, {"params": params["fc2"]}])
    opt = P.AdamW(0.01, parameters=[{"params": {"fc1": params["fc1"]}, "learning_rate": 0.5},
                                    {"params": {"fc2": params["fc2"]}}])
    assert jax.tree.structure(opt.parameters) == jax.tree.structure(params)
    tx = P.adamw(0.01, parameters=[{"params": ["fc1/*"], "learning_rate": 0.5}, {"params": ["fc2/*"]}])
    state, ref = tx.init(params), params
    grads = jax.tree.map(lambda a: jnp.full_like(a, 0.3), params)
    for _ in range(3):
        opt.step(grads)
        updates, state = tx.update(grads, state, ref)
        ref = jax.tree.map(lambda p, u: p + u, ref, updates)
    for got, want in zip(jax.tree.leaves(opt.parameters), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# -- ReduceOnPlateau resumes (Paddle's .pdopt, gradxform's own state_dict) ---------------------------

PDOPT = os.path.join(FIX, "plateau_resume.pdopt")
NAMES = {"fc/weight": "linear_0.w_0", "fc/bias": "linear_0.b_0"}


def _plateau_fixture():
    z = np.load(os.path.join(FIX, "plateau_resume.npz"))
    return z, json.loads(str(z["meta"]))


def _lin_loss(p, x, y):
    return jnp.mean((x @ p["fc"]["weight"] + p["fc"]["bias"] - y) ** 2)


def _plateau_opt(meta, w, b):
    sched = lr.ReduceOnPlateau(**meta["scheduler"]["kwargs"])
    return sched, P.Adam(learning_rate=sched, parameters={"fc": {"weight": jnp.asarray(w), "bias": jnp.asarray(b)}})


def _epochs(opt, sched, meta, x, y, lrs=None):
    hist = []
    for _ in range(meta["epochs"]):
        tot = 0.0
        for _ in range(meta["steps_per_epoch"]):
            if lrs is not None:
                lrs.append(opt.get_lr())
            loss, grads = jax.value_and_grad(_lin_loss)(opt.parameters, x, y)
            opt.step(grads)
            tot += float(loss)
            hist.append({k: np.asarray(v) for k, v in opt.parameters["fc"].items()})
        sched.step(tot / meta["steps_per_epoch"])
    return hist


def test_reduce_on_plateau_resumes_from_paddles_pdopt_with_paddles_numbers():
    z, meta = _plateau_fixture()
    sched, opt = _plateau_opt(meta, z["wk"], z["bk"])
    opt.set_state_dict(PDOPT, names=NAMES)
    assert sched.state_dict() == meta["saved_scheduler"]
    lrs: list = []
    hist = _epochs(opt, sched, meta, jnp.asarray(z["x"]), jnp.asarray(z["y"]), lrs)
    n = meta["epochs"] * meta["steps_per_epoch"]
    assert lrs == [float(z[f"lr_{t}"]) for t in range(n)]
    # the restored best metric matters: Paddle halves the rate after the first resumed epoch, which a
    # scheduler started afresh (best None) would not
    assert float(z[f"lr_{n - 1}"]) == meta["scheduler"]["kwargs"]["learning_rate"] / 2
    for t, h in enumerate(hist):
        np.testing.assert_allclose(h["weight"], z[f"w_{t}"], rtol=RTOL, atol=ATOL, err_msg=f"step {t}")
        np.testing.assert_allclose(h["bias"], z[f"b_{t}"], rtol=RTOL, atol=ATOL, err_msg=f"step {t}")


def test_reduce_on_plateau_resumes_from_its_own_state_dict_bit_for_bit():
    z, meta = _plateau_fixture()
    x, y = jnp.asarray(z["x"]), jnp.asarray(z["y"])
    sched, opt = _plateau_opt(meta, z["w0"], z["b0"])
    full = _epochs(opt, sched, meta, x, y) + _epochs(opt, sched, meta, x, y)
    sched1, opt1 = _plateau_opt(meta, z["w0"], z["b0"])
    _epochs(opt1, sched1, meta, x, y)
    saved = pickle.loads(pickle.dumps(opt1.state_dict()))
    assert saved["LR_Scheduler"] == sched1.state_dict()
    params = {k: np.asarray(v) for k, v in opt1.parameters["fc"].items()}
    sched2, opt2 = _plateau_opt(meta, params["weight"], params["bias"])
    opt2.set_state_dict(saved)
    assert sched2.state_dict() == sched1.state_dict()
    resumed = _epochs(opt2, sched2, meta, x, y)
    for a, b in zip(resumed, full[len(resumed):]):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_a_failed_plateau_load_leaves_optimizer_and_scheduler_as_they_were():
    z, meta = _plateau_fixture()
    sched, opt = _plateau_opt(meta, z["wk"], z["bk"])
    sd = read_paddle_state_dict(PDOPT)
    del sd["linear_0.b_0_moment2_0"]
    before_sched = sched.state_dict()
    before = jax.tree.map(np.asarray, opt.state)
    with pytest.raises(MigrateError, match="moment2"):
        opt.set_state_dict(sd, names=NAMES)
    assert sched.state_dict() == before_sched
    for a, b in zip(jax.tree.leaves(opt.state), jax.tree.leaves(before)):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_the_pure_pair_reads_the_accumulators_and_says_the_scheduler_is_the_users():
    """``from_paddle_state_dict`` with a scheduler object: the accumulators; the object's state is
    restored by ``sched.set_state_dict``. Forgotten, the first update refuses, saying what its count is."""
    z, meta = _plateau_fixture()
    params = {"fc": {"weight": jnp.asarray(z["wk"]), "bias": jnp.asarray(z["bk"])}}
    grads = jax.grad(_lin_loss)(params, jnp.asarray(z["x"]), jnp.asarray(z["y"]))
    sched = lr.ReduceOnPlateau(**meta["scheduler"]["kwargs"])
    tx = P.adam(learning_rate=sched)
    state = from_paddle_state_dict(PDOPT, params, tx, names=NAMES)
    with pytest.raises(Exception, match=r"step count is 2: the updates it has done, or, for a state read from a "
                                        r"Paddle file, the saved scheduler's last_epoch.*read_paddle_state_dict"):
        jax.block_until_ready(tx.update(grads, state, params))
    sched.set_state_dict(read_paddle_state_dict(PDOPT)["LR_Scheduler"])
    updates, _ = tx.update(grads, state, params)
    step0 = jax.tree.map(lambda p, u: np.asarray(p + u), params, updates)
    np.testing.assert_allclose(step0["fc"]["weight"], z["w_0"], rtol=RTOL, atol=ATOL)


def test_the_stateful_step_refuses_a_restarted_scheduler_before_it_takes_the_arrays():
    """``opt.step`` donates the parameters and state it holds: a restarted scheduler is refused on the host
    first (a refusal inside the jitted step would leave them deleted), so the run goes on once restored."""
    z, meta = _plateau_fixture()
    sched, opt = _plateau_opt(meta, z["wk"], z["bk"])
    opt.state = from_paddle_state_dict(PDOPT, opt.parameters, opt.tx, names=NAMES)  # the scheduler forgotten
    grads = jax.grad(_lin_loss)(opt.parameters, jnp.asarray(z["x"]), jnp.asarray(z["y"]))
    with pytest.raises(Exception, match=r"step count is 2.*Restore the scheduler"):
        opt.step(grads)
    assert not any(x.is_deleted() for x in jax.tree.leaves((opt.parameters, opt.state)))
    sched.set_state_dict(read_paddle_state_dict(PDOPT)["LR_Scheduler"])
    opt.step(grads)
    np.testing.assert_allclose(opt.parameters["fc"]["weight"], z["w_0"], rtol=RTOL, atol=ATOL)


def test_a_plateau_file_for_an_optimizer_with_a_fixed_rate_still_refuses():
    z, _ = _plateau_fixture()
    params = {"fc": {"weight": jnp.asarray(z["wk"]), "bias": jnp.asarray(z["bk"])}}
    with pytest.raises(MigrateError, match="PlateauState.last_lr"):
        from_paddle_state_dict(PDOPT, params, P.adam(learning_rate=0.05), names=NAMES)


# -- set_state_dict: names= and what the error says -----------------------------------------------

def test_set_state_dict_without_names_lists_the_files_keys_and_where_names_go():
    z, meta = _plateau_fixture()
    _, opt = _plateau_opt(meta, z["wk"], z["bk"])
    with pytest.raises(MigrateError) as err:
        opt.set_state_dict(PDOPT)
    msg = str(err.value)
    assert "'linear_0.b_0_moment1_0', 'linear_0.w_0_moment1_0'" in msg
    assert "opt.set_state_dict(path, names=...)" in msg
    assert "gradxform.migrate.from_paddle_state_dict(path, params, tx, names=...)" in msg
    with pytest.raises(MigrateError, match=r"names=\.\.\.\): 'fc/kernel' is not a parameter name"):
        opt.set_state_dict(PDOPT, names={"fc/kernel": "linear_0.w_0"})


# -- AdamW: a group's weight_decay is a number ----------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(L2Decay(0.5), "L2Decay"), (L1Decay(0.5), "L1Decay"),
                                          (None, "NoneType")])
def test_adamw_refuses_a_group_weight_decay_that_is_not_a_number(value, shown):
    w, b = jnp.ones((2, 1)), jnp.ones(1)
    match = rf"parameters\[0\]\['weight_decay'\]=.*must be a float.*got {shown}"
    with pytest.raises(TypeError, match=match):
        P.AdamW(0.1, parameters=[{"params": {"weight": w}, "weight_decay": value}, {"params": {"bias": b}}])
    with pytest.raises(TypeError, match=match):
        P.adamw(0.1, parameters=[{"params": ["weight"], "weight_decay": value}, {"params": ["bias"]}])


def test_adamw_group_weight_decay_number_is_the_decoupled_coefficient():
    w = jnp.ones((2, 1))
    opt = P.AdamW(0.1, parameters=[{"params": {"weight": w}, "weight_decay": 1}])
    opt.step({"weight": jnp.zeros((2, 1))})   # zero gradient: only the decay, w * (1 - lr * 1)
    np.testing.assert_allclose(np.asarray(opt.parameters["weight"]), np.full((2, 1), 0.9), rtol=1e-6)


def test_a_group_predicate_that_selects_nothing_is_refused_and_an_empty_group_is_not():
    # a predicate written for Paddle's names ('linear_0.w_0') selects nothing among gradxform's: refused,
    # naming the parameters; Paddle's own {'params': []} (a config may build one) stays a group of nothing
    params = {"fc1": {"weight": jnp.ones((2, 2)), "bias": jnp.zeros(2)}}
    tx = P.SGD(0.1, parameters=[{"params": lambda name: "linear_0" in name}, {"params": ["fc1/*"]}])
    with pytest.raises(ValueError, match=r"entry 0 .* matches no parameter; parameter names are .*fc1/bias"):
        tx.init(params)
    tx = P.SGD(0.1, parameters=[{"params": []}, {"params": ["fc1/*"]}])
    u, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    np.testing.assert_allclose(u["fc1"]["weight"], -0.1 * np.ones((2, 2)))


# -- Paddle's functions over parameters get gradxform's names --------------------------------------

def _two_layers():
    k = jax.random.split(jax.random.PRNGKey(0), 2)
    return {"fc1": {"weight": jax.random.normal(k[0], (3, 4)), "bias": jnp.full((4,), 0.1)},
            "fc2": {"weight": jax.random.normal(k[1], (4, 2)), "bias": jnp.full((2,), -0.1)}}


_PADDLE_NAMES = ["linear_0.w_0", "linear_1.w_0"]  # PaddleNLP's decay_params, built from Paddle's names


@pytest.mark.parametrize("make, keyword, fix", [
    (lambda params, fn: P.Lamb(0.02, lamb_weight_decay=0.05, parameters=params, exclude_from_weight_decay_fn=fn),
     "exclude_from_weight_decay_fn", "exclude_from_weight_decay_fn=None"),
    (lambda params, fn: P.AdamW(0.02, weight_decay=0.05, parameters=params, apply_decay_param_fun=fn),
     "apply_decay_param_fun", "weight_decay=0.0"),
])
def test_a_decay_function_written_for_paddles_names_is_refused_at_init(make, keyword, fix):
    # the port check's case (lamb_names.py): Paddle's names select nothing among 'fc1/bias', ...; Lamb's
    # biases were then off by 0.018 at step 1. Refused before any state exists, saying what to type.
    fn = (lambda p: p.name.endswith("b_0")) if keyword.startswith("exclude") else (lambda n: n in _PADDLE_NAMES)
    match = (rf"{keyword}=\.\.\.\): the function .* no parameter; it was called with \[.*'fc1/bias'.*"
             rf"'/'.*linear_0\.w_0.*{fix}")
    with pytest.raises(ValueError, match=match):
        make(_two_layers(), fn)
    pure = {"exclude_from_weight_decay_fn": P.lamb, "apply_decay_param_fun": P.adamw}[keyword]
    with pytest.raises(ValueError, match=match):
        pure(0.02, **{keyword: fn}).init(_two_layers())


def test_a_decay_function_that_selects_some_parameters_stays_as_it_was():
    # (Paddle's numbers for it: the exclude_names / decay_names cases of test_paddle_optimizers_parity.py)
    params = _two_layers()
    grads = jax.tree.map(jnp.ones_like, params)
    for make, kw, fn in ((P.lamb, "exclude_from_weight_decay_fn", lambda p: p.name.endswith("bias")),
                         (P.adamw, "apply_decay_param_fun", lambda n: n.endswith("weight"))):
        u = {}
        for f in (None, fn):
            tx = make(0.02, **{kw: f})
            u[f] = tx.update(grads, tx.init(params), params)[0]
        for layer in ("fc1", "fc2"):   # the biases' decay is off, the weights' as it was
            assert not np.allclose(u[None][layer]["bias"], u[fn][layer]["bias"])
            np.testing.assert_array_equal(u[None][layer]["weight"], u[fn][layer]["weight"])
    opt = P.Lamb(0.02, parameters=params, exclude_from_weight_decay_fn=lambda p: p.name.endswith("bias"))
    opt.step(grads)
    tx = P.lamb(0.02, exclude_from_weight_decay_fn=lambda p: p.name.endswith("bias"))
    np.testing.assert_allclose(np.asarray(opt.parameters["fc1"]["bias"]),
                               np.asarray(params["fc1"]["bias"] + tx.update(grads, tx.init(params), params)[0]["fc1"]["bias"]),
                               rtol=1e-6)


def test_a_decay_function_that_selects_nothing_where_no_decay_applies_is_not_refused():
    # coefficient 0: which parameters the function picks changes no number
    params, none = _two_layers(), (lambda p: False)
    P.lamb(0.02, lamb_weight_decay=0.0, exclude_from_weight_decay_fn=none).init(params)
    P.adamw(0.02, weight_decay=0.0, apply_decay_param_fun=none).init(params)


def test_optax_params_placeholder_does_not_refuse_a_decay_function():
    # optax.tree_map_params calls init with a placeholder that has no names: nothing to judge
    import optax
    params = _two_layers()
    for make, kw in ((P.lamb, "exclude_from_weight_decay_fn"), (P.adamw, "apply_decay_param_fun")):
        state = make(0.02, **{kw: lambda p: "bias" in str(getattr(p, "name", p))}).init(params)
        nothing = make(0.02, **{kw: lambda p: False})
        mapped = optax.tree_map_params(nothing, lambda x: x * 0, state)
        assert jax.tree.structure(mapped) == jax.tree.structure(state)


# Paddle 3.3.1 (CPU): AdamW(0.1, weight_decay=0.01) on a 3->1 linear model, one attribute assigned before the
# first of 3 steps on the mean squared error (X: RandomState(0).randn(8, 3), Y = X @ [1, -2, 3] + 0.5), the
# final weight and bias printed to 6 decimals
_PADDLE_ATTRIBUTE_RUNS = {
    "_beta1": (0.5, [-0.055781, -0.086587, -0.001835, -0.17768]),   # its beta1_pow_acc made at step 1: 0.5
    "_epsilon": (0.1, [-0.090855, -0.083398, -0.003231, -0.188399]),
    "_weight_decay": (0.5, [-0.098819, -0.109521, 0.027526, -0.20092]),
}


@pytest.mark.parametrize("attr", sorted(_PADDLE_ATTRIBUTE_RUNS))
def test_an_assigned_paddle_hyperparameter_attribute_gives_paddles_numbers(attr):
    value, expected = _PADDLE_ATTRIBUTE_RUNS[attr]
    rng = np.random.RandomState(0)
    x = rng.randn(8, 3).astype("float32")
    y = (x @ np.array([1.0, -2.0, 3.0], "float32") + 0.5).astype("float32")
    params = {"weight": jnp.asarray([[0.1], [0.2], [-0.3]]), "bias": jnp.asarray([0.05])}
    opt = P.AdamW(learning_rate=0.1, parameters=params, weight_decay=0.01)
    setattr(opt, attr, value)
    loss = lambda p: jnp.mean(((x @ p["weight"] + p["bias"]).squeeze(-1) - y) ** 2)  # noqa: E731
    for _ in range(3):
        opt.step(jax.grad(loss)(opt.parameters))
    got = np.concatenate([np.ravel(opt.parameters["weight"]), np.ravel(opt.parameters["bias"])])
    np.testing.assert_allclose(got, expected, atol=2e-6)  # Paddle's printed 6 decimals


def test_paddle_hyperparameter_attributes_are_read_and_set_through_the_state():
    """Paddle's update reads ``self._beta1``, ``self._epsilon``, AdamW's ``self._weight_decay`` every step, so
    scripts assign them: here they are the state's hyperparameters (no recompile); an attribute the update
    would never read is refused instead of set and ignored."""
    params = {"w": jnp.ones(3), "b": jnp.zeros(1)}
    opt = P.AdamW(0.1, parameters=params, weight_decay=0.01)
    assert (opt._beta1, opt._weight_decay) == (np.float32(0.9), np.float32(0.01))
    opt._learning_rate = 0.05  # a number: set_lr
    assert opt.get_lr() == np.float32(0.05)
    with pytest.raises(AttributeError, match=r"_coeff = \.\.\.: this optimizer's update would never read it.*_beta1"):
        opt._coeff = 1.0
    with pytest.raises(AttributeError, match=r"_lazy_mode: not kept on this object"):
        opt._lazy_mode
    with pytest.raises(AttributeError, match="pass grad_clip= when building"):
        opt._grad_clip = None
    with pytest.raises(ValueError, match=r"beta1 must be in \[0, 1\)"):
        opt._beta1 = 2.0
    with pytest.raises(TypeError, match="learning_rate=scheduler"):
        opt._learning_rate = lr.StepDecay(0.1, 2)


def test_the_stateful_face_refuses_to_be_wrapped_or_to_swap_its_pair_saying_what_to_write():
    # a port of GradScaler wraps the optimizer: the face holds parameters and state made by its own pair
    from gradxform.pieces import dynamic_loss_scale  # noqa: PLC0415

    opt = P.AdamW(learning_rate=1e-3, parameters={"w": jnp.ones(3)})
    with pytest.raises(TypeError, match=r"build the optimizer without parameters= \(or pass opt.tx\)"):
        dynamic_loss_scale(opt)
    with pytest.raises(AttributeError, match="optimizer.tx = ...: the optimizer is fixed when built"):
        opt.tx = dynamic_loss_scale(opt.tx)
    assert "LossScaleState" not in repr(opt.state)
