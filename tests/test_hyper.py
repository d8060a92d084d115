"""Hyperparameters as state: read, set, range checks, and no recompiles."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx

PARAMS = {"w": jnp.ones((3, 2)), "b": jnp.zeros((2,))}
GRADS = jax.tree.map(lambda p: jnp.full_like(p, 0.5), PARAMS)


def test_every_hyperparameter_is_a_float32_scalar_even_for_bfloat16_params():
    tx = gx.create("adam", beta2=0.999, wd=0.1)
    with pytest.warns(UserWarning, match="multi_precision"):
        state = tx.init(jax.tree.map(lambda p: p.astype(jnp.bfloat16), PARAMS))
    for name in gx.hyper_names(state):
        v = gx.get_hyper(state, name)
        # the one flag, 'scheduled', is int32 0/1 (it survives arithmetic selection: optax.contrib.sam)
        assert v.shape == () and v.dtype == (jnp.int32 if name == "scheduled" else jnp.float32), name
    assert float(gx.get_hyper(state, "beta2")) == np.float32(0.999)  # not rounded to bf16's 1.0


def test_set_hyper_changes_the_step_without_retracing():
    tx = gx.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.01, rescale_grad=1.0)

    @jax.jit
    @chex.assert_max_traces(n=1)  # a second trace raises inside the step
    def step(params, state):
        updates, state = tx.update(GRADS, state, params)
        return gx.apply_updates(params, updates), state

    _, state = step(PARAMS, tx.init(PARAMS))  # a first step, so the momentum buffer is not zero
    p1, _ = step(PARAMS, state)
    for values in ({"learning_rate": 0.5}, {"wd": 0.2}, {"momentum": 0.1}, {"rescale_grad": 0.25}):
        p2, _ = step(PARAMS, gx.set_hyper(state, **values))
        assert not np.allclose(p2["w"], p1["w"]), values


def test_learning_rate_read_and_set():
    tx = gx.create("adam", learning_rate=0.01)
    state = tx.init(PARAMS)
    assert gx.get_learning_rate(state) == pytest.approx(0.01)
    state = gx.set_learning_rate(state, 0.003)
    assert gx.get_learning_rate(state) == pytest.approx(0.003)
    u_small, _ = tx.update(GRADS, state, PARAMS)
    u_big, _ = tx.update(GRADS, gx.set_learning_rate(state, 0.03), PARAMS)
    np.testing.assert_allclose(u_big["w"], 10 * u_small["w"], rtol=1e-6)


def test_learning_rate_follows_the_schedule_and_refuses_a_manual_set():
    sched = gx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    tx = gx.create("sgd", lr_scheduler=sched)
    state = tx.init(PARAMS)
    seen = []
    for _ in range(5):
        _, state = tx.update(GRADS, state, PARAMS)
        seen.append(gx.get_learning_rate(state))
    np.testing.assert_allclose(seen, [1.0, 1.0, 0.5, 0.5, 0.25])
    with pytest.raises(UserWarning, match="LRScheduler"):
        gx.set_learning_rate(state, 0.1)


@pytest.mark.parametrize("name, value, message", [
    ("learning_rate", -1.0, r"learning_rate must be in \[0, inf\)"),
    ("momentum", 1.5, r"momentum must be in \[0, 1\)"),
    ("wd", -0.1, "wd must be"),
])
def test_set_hyper_checks_ranges_on_the_host(name, value, message):
    state = gx.create("sgd", momentum=0.9).init(PARAMS)
    with pytest.raises(ValueError, match=message):
        gx.set_hyper(state, **{name: value})


def test_unknown_and_derived_names_are_refused():
    state = gx.create("sgd").init(PARAMS)
    with pytest.raises(KeyError, match="beta1"):
        gx.set_hyper(state, beta1=0.5)
    with pytest.raises(KeyError, match="derived"):
        gx.set_hyper(state, current_lr=0.5)
    with pytest.raises(KeyError, match="holds"):
        gx.get_hyper(state, "nope")


def test_set_beta_keeps_float64_accuracy_of_bias_correction():
    # the float32 residual travels with the value, so 1 - beta2**t stays accurate
    tx = gx.create("adam", beta2=0.99)
    state = gx.set_hyper(tx.init(PARAMS), beta2=0.999)
    reference = gx.create("adam", beta2=0.999).init(PARAMS)
    a, _ = tx.update(GRADS, state, PARAMS)
    b, _ = tx.update(GRADS, reference, PARAMS)
    np.testing.assert_array_equal(a["w"], b["w"])


# -- every settable hyperparameter of every registered optimizer has a declared range,
#    checked on the float32 value it is stored as (gradxform._ranges) ----------------------

import re  # noqa: E402
import warnings  # noqa: E402

import cases  # noqa: E402
from gradxform._hyper import READ_ONLY  # noqa: E402
from gradxform._ranges import HyperName, declared_range, owner_of, stored_float32  # noqa: E402


def _slots():
    """(optimizer, hyperparameter, owner of the slot) for every settable slot."""
    out = []
    for name in cases.names():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = cases.create(name).init(PARAMS)
        owners = {}
        gx._hyper._walk(state, lambda d, _: [owners.setdefault(str(k), set()).add(owner_of(k)) for k in d])
        for h in gx.hyper_names(state):
            if h not in READ_ONLY:
                out.append((name, h, tuple(sorted(owners[h], key=str))))
    return out


SLOTS = _slots()


def _state(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cases.create(name).init(PARAMS)


def test_the_slot_table_covers_every_registered_optimizer():
    assert {n for n, _, _ in SLOTS} == set(cases.names())
    assert len(SLOTS) >= 146  # the count the issue measured


@pytest.mark.parametrize("opt, hyper, owners", SLOTS, ids=[f"{n}-{h}" for n, h, _ in SLOTS])
def test_every_slot_has_a_declared_range_and_an_owner(opt, hyper, owners):
    for owner in owners:
        assert owner is not None, f"{opt}: {hyper} is not marked with its optimizer"
        assert declared_range(owner, hyper) is not None, (opt, hyper, owner)
    value = float(gx.get_hyper(_state(opt), hyper))
    for owner in owners:  # the value the optimizer was built with is inside its own range
        assert value in declared_range(owner, hyper), (opt, hyper, value)


@pytest.mark.parametrize("opt, hyper, owners", SLOTS, ids=[f"{n}-{h}" for n, h, _ in SLOTS])
def test_set_hyper_refuses_nan_inf_and_overflow_and_leaves_the_state(opt, hyper, owners):
    state = _state(opt)
    before = jax.tree.map(np.asarray, state)
    bad = [float("nan"), float("inf"), float("-inf"), 1e40, -1e40]
    if any(-1.0 not in declared_range(o, hyper) for o in owners):
        bad.append(-1.0)
    for value in bad:
        with pytest.raises(ValueError, match=re.escape(f"set_hyper({hyper}=...): {hyper} must be in ")) as err:
            gx.set_hyper(state, **{hyper: value})
        assert f"got {value!r}" in str(err.value)
    # a valid value given with a bad one is refused with it; the state is unchanged
    with pytest.raises(ValueError, match=re.escape(f"set_hyper({hyper}=...)")):
        gx.set_hyper(state, **{"learning_rate": 0.125, hyper: float("nan")})
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state), before)
    # the value it was built with can be set back (the goldens' values pass)
    ok = gx.set_hyper(state, **{hyper: float(gx.get_hyper(state, hyper))})
    assert float(gx.get_hyper(ok, hyper)) == float(gx.get_hyper(state, hyper))


def test_values_are_judged_as_stored_in_float32():
    state = gx.create("adam").init(PARAMS)
    # 1 - 1e-10 rounds to 1.0 in float32: outside [0, 1) as stored
    with pytest.raises(ValueError, match=re.escape("beta2 must be in [0, 1); got 0.9999999999, which is 1.0 "
                                                   "as float32.")):
        gx.set_hyper(state, beta2=1 - 1e-10)
    with pytest.raises(ValueError, match=re.escape("beta2 must be in [0, 1); got 0.9999999999, which is 1.0")):
        gx.create("adam", beta2=1 - 1e-10)
    # 1e-46 rounds to 0 (and a float32 subnormal is flushed to 0 by XLA): outside (0, inf)
    for tiny in (1e-46, 1e-40):
        with pytest.raises(ValueError, match=re.escape(f"epsilon must be in (0, inf); got {tiny!r}, which is 0.0")):
            gx.set_hyper(state, epsilon=tiny)
        with pytest.raises(ValueError, match="epsilon must be in"):
            gx.create("adam", epsilon=tiny)
    with pytest.raises(ValueError, match=re.escape("learning_rate must be in [0, inf); got 1e+40, which is inf "
                                                   "as float32.")):
        gx.create("sgd", learning_rate=1e40)
    assert stored_float32(3e38) == float(np.float32(3e38))
    gx.set_hyper(state, learning_rate=3e38, beta2=float(np.nextafter(np.float32(1), np.float32(0))))


@pytest.mark.parametrize("name, kwargs, hyper, good, bad, message", [
    # MindSpore's momentum has no upper bound (Momentum: momentum >= 0); MXNet's is [0, 1)
    ("mindspore.momentum", dict(learning_rate=0.1, momentum=0.9), "momentum", 1.5, -0.5, "[0, inf)"),
    ("sgd", dict(momentum=0.9), "momentum", 0.5, 1.5, "[0, 1)"),
    # MindSpore Adam: betas in (0, 1) (check_float_range INC_NEITHER); MXNet takes beta1=0
    ("mindspore.adam", dict(learning_rate=0.1), "beta1", 0.5, 0.0, "(0, 1)"),
    ("adam", {}, "beta1", 0.0, 1.0, "[0, 1)"),
    # MindSpore FTRL divides by the learning rate: > 0; elsewhere 0 is allowed
    ("mindspore.ftrl", dict(learning_rate=0.1), "learning_rate", 0.5, 0.0, "(0, inf)"),
    ("mindspore.adagrad", dict(learning_rate=0.1), "learning_rate", 0.0, -1.0, "[0, inf)"),
    # LARS takes epsilon = 0; its wrapped Momentum keeps MindSpore's momentum range
    ("mindspore.lars", cases.case("mindspore.lars").kwargs, "epsilon", 0.0, -1e-8, "[0, inf)"),
    ("mindspore.lars", cases.case("mindspore.lars").kwargs, "momentum", 2.0, -1.0, "[0, inf)"),
    # AdaFactor's weight_decay is in [0, 1)
    ("mindspore.adafactor", cases.case("mindspore.adafactor").kwargs, "weight_decay", 0.5, 1.0, "[0, 1)"),
    # MXNet AdaGrad's eps may be 0, at construction and in set_hyper alike
    ("adagrad", {}, "eps", 0.0, -1e-7, "[0, inf)"),
    ("mindspore.ftrl", dict(learning_rate=0.1), "lr_power", 0.0, 0.5, "(-inf, 0]"),
])
def test_set_hyper_uses_the_range_of_the_optimizer_that_owns_the_slot(name, kwargs, hyper, good, bad, message):
    state = gx.create(name, **kwargs).init(PARAMS)
    assert float(gx.get_hyper(gx.set_hyper(state, **{hyper: good}), hyper)) == good
    with pytest.raises(ValueError, match=re.escape(f"set_hyper({hyper}=...): {hyper} must be in {message}; "
                                                   f"got {bad!r}.")):
        gx.set_hyper(state, **{hyper: bad})


def test_group_hyperparameters_have_the_range_of_their_base_name():
    groups = [{"params": "w", "lr": 0.2, "weight_decay": 0.01}, {"params": "b"}]
    state = gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9, groups=groups).init(PARAMS)
    names = [n for n in gx.hyper_names(state) if n.endswith("_groups")]
    assert sorted(names) == ["learning_rate_groups", "weight_decay_groups"]
    for n in names:
        base = n[:-len("_groups")]
        with pytest.raises(ValueError, match=re.escape(f"set_hyper({base}=...): {base} must be in [0, inf); got "
                                                       "-1.0. (group 0's own value; the range of mindspore.")):
            gx.set_hyper(state, group=0, **{base: -1.0})
        with pytest.raises(ValueError, match=re.escape(f"{base} must be in [0, inf); got nan")):
            gx.set_hyper(state, group=0, **{base: float("nan")})
        with pytest.raises(ValueError, match=re.escape(f"{n} must be in [0, inf); got -1.0")):
            gx.set_hyper(state, **{n: [-1.0]})  # the whole vector, entry by entry


def test_owner_marks_survive_jit_and_a_checkpoint_round_trip(tmp_path):
    tx = gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9)
    state = jax.jit(tx.update)(GRADS, tx.init(PARAMS), PARAMS)[1]
    keys = []
    gx._hyper._walk(state, lambda d, _: keys.extend(d))
    assert keys and all(isinstance(k, HyperName) and k.owner == "mindspore.momentum" for k in keys)
    gx.set_hyper(state, momentum=1.5)  # MindSpore's range, not MXNet's [0, 1)
    path = tmp_path / "s.npz"
    gx.save_state(path, state)
    loaded = gx.load_state(path, like=tx.init(PARAMS))
    gx.set_hyper(loaded, momentum=1.5)
    with pytest.raises(ValueError, match=re.escape("momentum must be in [0, inf)")):
        gx.set_hyper(loaded, momentum=-0.5)


def test_plain_pieces_and_optax_states_are_checked_with_the_generic_ranges():
    import optax  # noqa: PLC0415
    state = gx.chain(gx.pieces.track_step(0.1), gx.pieces.trace(0.9)).init(PARAMS)
    gx.set_hyper(state, momentum=1.0)  # the trace piece takes [0, 1]
    with pytest.raises(ValueError, match=re.escape("momentum must be in [0, 1]; got 1.5.")):
        gx.set_hyper(state, momentum=1.5)
    ostate = optax.inject_hyperparams(optax.adam)(learning_rate=0.1).init(PARAMS)
    with pytest.raises(ValueError, match=re.escape("eps_root must be in (-inf, inf); got nan.")):
        gx.set_hyper(ostate, eps_root=float("nan"))  # undeclared names: finite
    with pytest.raises(ValueError, match=re.escape("b1 must be in [0, 1]; got 1.5.")):
        gx.set_hyper(ostate, b1=1.5)  # optax's b1: the range scale_by_lion declares for that name


# set_hyper inside jit: a traced value is range-checked in the program, and one
# out of range leaves the slot as it was (a jitted program cannot raise). Each row:
# an optimizer, a name, a value its host path refuses, and one it accepts.
_TRACED_CASES = [
    ("adam", dict(learning_rate=0.1), "learning_rate", -1.0, 0.05),
    ("adam", dict(learning_rate=0.1), "learning_rate", float("nan"), 0.05),
    ("adam", dict(learning_rate=0.1), "learning_rate", float("inf"), 0.05),
    ("adam", dict(learning_rate=0.1), "beta1", 1.5, 0.8),
    ("adam", dict(learning_rate=0.1), "epsilon", -1e-8, 1e-6),
    ("paddle.adam", dict(learning_rate=0.1), "beta2", 1.0, 0.99),
]


@pytest.mark.parametrize("name, kwargs, hyper, bad, good", _TRACED_CASES)
def test_set_hyper_under_jit_refuses_what_the_host_refuses(name, kwargs, hyper, bad, good):
    tx = gx.create(name, **kwargs)
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    state = tx.init(params)
    with pytest.raises(ValueError):
        gx.set_hyper(state, **{hyper: bad})  # the host path

    @jax.jit
    def set_then_step(state, value):
        state = gx.set_hyper(state, **{hyper: value})
        return tx.update({"w": jnp.array([0.5, 0.5, -0.5])}, state, params)

    before = np.asarray(gx.get_hyper(state, hyper))
    updates, refused = set_then_step(state, jnp.float32(bad))
    np.testing.assert_array_equal(np.asarray(gx.get_hyper(refused, hyper)), before)
    assert np.isfinite(np.asarray(updates["w"])).all()
    reference, _ = tx.update({"w": jnp.array([0.5, 0.5, -0.5])}, state, params)
    np.testing.assert_array_equal(np.asarray(updates["w"]), np.asarray(reference["w"]))

    _, taken = set_then_step(state, jnp.float32(good))
    np.testing.assert_array_equal(np.asarray(gx.get_hyper(taken, hyper)), np.float32(good))


def test_inject_hyperparams_points_to_set_hyper():
    import optax
    tx = optax.inject_hyperparams(gx.mxnet.adam)(learning_rate=0.1)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    with pytest.raises(TypeError, match=r"gradxform.set_hyper\(state, learning_rate=\.\.\.\)"):
        jax.jit(tx.update)(params, state, params)
