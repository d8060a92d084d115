"""Issue 40 items 3-7: one check for a value whatever its type or route; counters with a stated
end; every jitted schedule equal to its framework's host value at every count; odd values with
documented errors; checkpoint paths of any legal length and file modes that follow the umask.

Tolerances of the schedule sweep are the existing ones (tests/test_schedules.py,
tests/test_paddle_lr.py, tests/test_mindspore_lr.py): float32 in the program against float64 on
the host, rtol 5e-6 and atol 1e-9."""
import math
import os
import stat
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
import gradxform.schedules as S
from gradxform._domains import MAX_COUNT
from gradxform.paddle import lr as plr
from gradxform.trainer import Trainer

import mxnet_schedules_reference as mxref
from test_mindspore_lr import ref_schedule as ms_ref

PARAMS = {"w": jnp.ones(3)}
GRADS = {"w": jnp.full((3,), 0.5)}

# -- item 6 (and 3): one check for a value, whatever its type or route -------------------------

HUGE = 10**400
REFUSED = [  # (value, error, what the message says)
    (HUGE, ValueError, "must be in [0, inf); got 1000"),
    (-HUGE, ValueError, "must be in [0, inf); got -1000"),
    ("0.1", TypeError, "must be a number"),
    (b"0.1", TypeError, "must be a number"),
    (0.1 + 1j, TypeError, "must be a number"),
    (np.complex64(0.1 + 1j), TypeError, "must be a number"),
    (np.complex128(0.1), TypeError, "must be a number"),
    (jnp.complex64(0.1), TypeError, "must be a number"),
    (True, TypeError, "must be a number"),
    (np.bool_(True), TypeError, "must be a number"),
    (float("nan"), ValueError, "must be in [0, inf)"),
    (np.float32("inf"), ValueError, "must be in [0, inf)"),
    (jnp.float32(-0.1), ValueError, "must be in [0, inf)"),
    (np.array(-1), ValueError, "must be in [0, inf)"),
    (1e40, ValueError, "which is inf as float32"),
]
ACCEPTED = [0.1, 1, np.float32(0.1), np.float64(0.1), np.int64(1), np.array(0.1), jnp.float32(0.1),
            jnp.asarray(0.1, jnp.bfloat16), np.array(0.1, np.float16)]


def _set_hyper(v):
    return gx.set_hyper(gx.create("adam").init(PARAMS), learning_rate=v)


def _set_learning_rate(v):
    return gx.set_learning_rate(gx.create("adam").init(PARAMS), v)


def _create(v):
    return gx.create("adam", learning_rate=v)


def _create_ms(v):
    return gx.create("mindspore.momentum", learning_rate=v, momentum=0.9)


def _paddle_set_state_dict(v):
    sched = plr.StepDecay(0.1, 2)
    sched.set_state_dict({"last_epoch": 0, "last_lr": v})
    return sched


def _tree_set_then_update(v):
    tx = gx.create("adam")
    state = optax.tree_utils.tree_set(tx.init(PARAMS), learning_rate=v)
    return tx.update(GRADS, state, PARAMS)


ROUTES = {"set_hyper": _set_hyper, "set_learning_rate": _set_learning_rate, "create": _create,
          "paddle.set_state_dict": _paddle_set_state_dict, "tree_set+update": _tree_set_then_update}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("value, error, message", REFUSED, ids=[repr(v[0])[:24] for v in REFUSED])
def test_every_route_refuses_the_same_values_with_the_same_error(route, value, error, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: refused, not stored as its real part
        with pytest.raises(error) as err:
            ROUTES[route](value)
    assert message in str(err.value), str(err.value)
    assert "learning_rate" in str(err.value) or "last_lr" in str(err.value)
    assert not isinstance(err.value, OverflowError)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("value", ACCEPTED, ids=[repr(v)[:24] for v in ACCEPTED])
def test_every_route_accepts_the_same_values(route, value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if route == "tree_set+update" and getattr(value, "dtype", None) in (jnp.bfloat16, np.float16):
            # an array written into a float32 slot must be float32: the update's structure check names it
            with pytest.raises(ValueError, match=r"learning_rate'\] is (bfloat16|float16)\[\] but .* float32"):
                ROUTES[route](value)
            return
        ROUTES[route](value)


@pytest.mark.parametrize("value, error", [(HUGE, ValueError), (-HUGE, ValueError), ("0.1", TypeError),
                                          (0.1 + 1j, TypeError), (np.complex64(0.1), TypeError),
                                          (True, TypeError), (1e40, ValueError)])
def test_mindspore_and_paddle_constructors_refuse_odd_values(value, error):
    with pytest.raises(error):
        _create_ms(value)
    with pytest.raises((error, TypeError)):  # Paddle's own type check: float or int only
        plr.StepDecay(value, 2)
    with pytest.raises((error, TypeError)):
        S.PaddleStepDecay(value, 2)


@pytest.mark.parametrize("value", [HUGE, -2, 2.5, "3", 0.5 + 1j])
def test_paddle_set_state_dict_checks_last_epoch(value):
    with pytest.raises((TypeError, ValueError), match="last_epoch"):
        plr.StepDecay(0.1, 2).set_state_dict({"last_epoch": value, "last_lr": 0.1})


# -- item 3: values written around the checks (tree_set), eager and inside jit -----------------

@pytest.mark.parametrize("field, value", [
    ("learning_rate", jnp.float32(-0.1)), ("learning_rate", jnp.float32(jnp.nan)),
    ("learning_rate", jnp.float32(jnp.inf)), ("learning_rate", np.float32(-0.1)), ("learning_rate", -0.1),
    ("beta1", jnp.float32(1.5)), ("count", -5), ("count", jnp.int32(-5)), ("count", np.int32(-5)),
    ("count", jnp.int32(2**31 - 1)), ("count", np.int32(2**31 - 1)),
])
def test_an_eager_update_refuses_a_written_value_of_any_type(field, value):
    tx = gx.create("adam")
    state = optax.tree_utils.tree_set(tx.init(PARAMS), **{field: value})
    with pytest.raises(ValueError, match=rf"{field} must be in .*tree_set"):
        tx.update(GRADS, state, PARAMS)


@pytest.mark.parametrize("count, taken_as", [(-5, 0), (-2**31, 0), (2**31 - 1, MAX_COUNT), (MAX_COUNT, MAX_COUNT)])
def test_inside_jit_a_count_outside_its_range_is_taken_as_the_nearest_end(count, taken_as):
    tx = gx.create("adam", learning_rate=0.1)
    step = jax.jit(tx.update)
    state = tx.init(PARAMS)
    u, s = step(GRADS, optax.tree_utils.tree_set(state, count=jnp.int32(count)), PARAMS)
    want, ws = step(GRADS, optax.tree_utils.tree_set(state, count=jnp.int32(taken_as)), PARAMS)
    assert np.all(np.isfinite(u["w"]))
    np.testing.assert_array_equal(u["w"], want["w"])
    assert int(optax.tree_utils.tree_get(s, "count")) == int(optax.tree_utils.tree_get(ws, "count"))
    assert 0 <= int(optax.tree_utils.tree_get(s, "count")) <= MAX_COUNT


# -- item 4: counters with a stated end -------------------------------------------------------

@pytest.mark.parametrize("masked", [False, True])
def test_the_count_stops_at_max_count_and_never_wraps(masked):
    tx = gx.create("adam", learning_rate=0.1)
    state = optax.tree_utils.tree_set(tx.init(PARAMS), count=jnp.int32(MAX_COUNT - 1))
    kw = {"update_mask": {"w": jnp.asarray(True)}} if masked else {}
    step = jax.jit(lambda g, s, p: tx.update(g, s, p, **kw))
    seen = []
    for _ in range(3):
        u, state = step(GRADS, state, PARAMS)
        assert np.all(np.isfinite(u["w"]))
        seen.append(int(optax.tree_utils.tree_get(state, "count")))
        tx.update(GRADS, state, PARAMS, **kw)  # an eager update accepts what a run produced
    assert seen == [MAX_COUNT] * 3
    assert gx.checkpoint.domain_error(state) is None


def test_track_step_refuses_a_begin_count_past_the_end():
    with pytest.raises(ValueError, match="begin_num_update"):
        gx.pieces.track_step(0.1, begin_num_update=MAX_COUNT + 1)
    gx.pieces.track_step(0.1, begin_num_update=MAX_COUNT)


@pytest.mark.parametrize("fused", [True, False])
def test_trainer_files_at_the_last_count_load_back(tmp_path, fused):
    t = Trainer({"a": jnp.ones(3), "b": jnp.zeros(2)}, "adam", {"learning_rate": 0.01},
                devices=jax.devices()[:1], fused=fused)
    state = t.state
    t.load_states(optax.tree_utils.tree_set(state, count=jnp.int32(MAX_COUNT - 1)))
    grads = {"a": jnp.ones((1, 3)), "b": jnp.ones((1, 2))}  # one copy per device
    for k in range(3):
        t.step(grads, 1)
        t.save_states(tmp_path / f"s{k}")
        u = Trainer({"a": jnp.ones(3), "b": jnp.zeros(2)}, "adam", {"learning_rate": 0.01},
                    devices=jax.devices()[:1], fused=fused)
        u.load_states(tmp_path / f"s{k}")
        assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(t.params))
        counts = [int(np.max(c)) for c in jax.tree.leaves(optax.tree_utils.tree_get_all_with_path(u.state, "count"))
                  if np.issubdtype(np.asarray(c).dtype, np.integer)]
        assert counts and max(counts) == MAX_COUNT


# -- item 5: every jitted schedule equals its framework's host value at every count ------------

N = 30  # counts 0..N-1: every schedule below ends (or turns) before 20
PADDLE = [  # (gradxform.paddle.lr class, so gradxform.schedules.Paddle<class>, args)
    ("StepDecay", (0.1, 3, 0.5)), ("MultiStepDecay", (0.1, [2, 5, 9], 0.3)), ("ExponentialDecay", (0.1, 0.9)),
    ("NaturalExpDecay", (0.1, 0.2)), ("InverseTimeDecay", (0.1, 0.3)),
    ("PolynomialDecay", (0.1, 10, 0.0, 0.5)), ("PolynomialDecay", (0.1, 100, 0.0, 0.5)),
    ("PolynomialDecay", (0.1, 7, 0.01, 2.0)), ("PolynomialDecay", (0.1, 6, 0.0, 0.5, True)),
    ("PolynomialDecay", (0.1, 10, 0.0001, 1.0)), ("PiecewiseDecay", ([3, 7], [0.1, 0.05, 0.01])),
    ("CosineAnnealingDecay", (0.1, 10, 0.001)), ("LinearWarmup", (0.1, 5, 0.0, 0.1)),
    ("NoamDecay", (64, 5, 1.0)), ("OneCycleLR", (0.1, 20)),
    ("CyclicLR", (0.01, 0.1, 4)), ("LinearLR", (0.1, 10, 0.25, 1.0)),
]


@pytest.mark.parametrize("name, args", PADDLE, ids=[f"{n}{a}" for n, a in PADDLE])
def test_paddle_schedules_jitted_equal_paddle_at_every_count(name, args):
    jitted = getattr(S, "Paddle" + name)(*args)
    host = getattr(plr, name)(*args)
    n = 100 + N if args == (0.1, 100, 0.0, 0.5) else 20 if name == "OneCycleLR" else N  # Paddle: no step 21
    f = jax.jit(lambda c: jitted.lr_for_update(c))
    got, want = [], []
    for count in range(1, n + 1):  # update `count` reads last_epoch = count - 1
        got.append(float(f(jnp.int32(count))))
        want.append(host())
        host.step()
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=1e-9)


MINDSPORE = [
    ("ExponentialDecayLR", (0.1, 0.9, 4)), ("ExponentialDecayLR", (0.1, 0.9, 4, True)),
    ("NaturalExpDecayLR", (0.1, 0.2, 3)), ("InverseDecayLR", (0.1, 0.5, 4, True)),
    ("CosineDecayLR", (0.001, 0.1, 10)), ("PolynomialDecayLR", (0.1, 0.0, 10, 0.5)),
    ("PolynomialDecayLR", (0.1, 0.01, 7, 2.0)), ("PolynomialDecayLR", (0.1, 0.0, 6, 0.5, True)),
    ("WarmUpLR", (0.1, 8)),
]


@pytest.mark.parametrize("name, args", MINDSPORE, ids=[f"{n}{a}" for n, a in MINDSPORE])
def test_mindspore_schedules_jitted_equal_the_float64_formula_at_every_count(name, args):
    sched = getattr(S, name)(*args)
    f = jax.jit(lambda c: sched.lr_for_update(c))
    got = [float(f(jnp.int32(count))) for count in range(1, N + 1)]  # global_step = count - 1
    want = [ms_ref(name, args, step) for step in range(N)]
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=1e-9)


MXNET = [
    ("FactorScheduler", dict(step=3, factor=0.5, base_lr=0.1)),
    ("FactorScheduler", dict(step=2, factor=0.5, base_lr=0.1, stop_factor_lr=0.01, warmup_steps=3)),
    ("MultiFactorScheduler", dict(step=[2, 5, 9], factor=0.3, base_lr=0.1)),
    ("PolyScheduler", dict(max_update=10, base_lr=0.1, pwr=0.5)),
    ("PolyScheduler", dict(max_update=12, base_lr=0.1, pwr=2, final_lr=0.001, warmup_steps=3)),
    ("CosineScheduler", dict(max_update=10, base_lr=0.1, final_lr=0.001)),
    ("CosineScheduler", dict(max_update=12, base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.01)),
]


@pytest.mark.parametrize("name, kw", MXNET, ids=[f"{n}{sorted(k.items())}" for n, k in MXNET])
def test_mxnet_schedules_jitted_equal_mxnet_at_every_count(name, kw):
    sched = getattr(S, name)(**kw)
    host = getattr(mxref, name)(**kw)
    f = jax.jit(lambda c: sched.lr_for_update(c))
    got = [float(f(jnp.int32(count))) for count in range(1, N + 1)]  # MXNet: num_update = count
    want = [host(count) for count in range(1, N + 1)]
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=1e-9)


def test_polynomial_decay_reaches_end_lr_under_jit():  # the case
    sched = S.PaddlePolynomialDecay(0.1, 100, end_lr=0.0, power=0.5)
    values = jax.jit(sched)(jnp.arange(95, 110))
    np.testing.assert_array_equal(np.asarray(values)[5:], 0.0)
    assert float(sched(jnp.int32(100))) == 0.0


# -- item 7: paths and permissions -----------------------------------------------------------

@pytest.mark.parametrize("length", [1, 200, 240, 245, 250, 255])
def test_any_name_the_filesystem_accepts_can_be_saved_to(tmp_path, length):
    path = tmp_path / ("n" * length)
    tree = {"x": jnp.arange(3.0)}
    gx.save_state(path, tree)
    gx.save_state(path, tree)  # an overwrite too
    np.testing.assert_array_equal(gx.load_state(path, like=tree)["x"], tree["x"])
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_follows_the_umask_and_an_overwrite_keeps_the_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = tmp_path / "state.ckpt"
        gx.save_state(path, {"x": jnp.zeros(2)})
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
        os.chmod(path, 0o640)
        gx.save_state(path, {"x": jnp.zeros(2)})
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    finally:
        os.umask(old)


def test_a_killed_writers_long_name_temp_is_cleaned(tmp_path):
    import time
    path = tmp_path / ("n" * 250)
    stray = tmp_path / ".gx-abcdefgh.tmp"
    stray.write_bytes(b"x")
    past = time.time() - 3600
    os.utime(stray, (past, past))
    gx.save_state(path, {"x": jnp.zeros(2)})
    assert not stray.exists()
    assert math.isfinite(float(gx.load_state(path, like={"x": jnp.zeros(2)})["x"][0]))


@pytest.mark.parametrize("written", [-0.1, np.nan, np.inf])
def test_a_base_rate_written_inside_jit_out_of_range_is_used_as_0(written):
    # the host check cannot see a value written inside the user's jit (tree_set on a traced state):
    # a NaN, infinite or negative base is used as 0, as a schedule's rate is; never gradient ascent
    tx = gx.create("sgd", learning_rate=0.1)

    @jax.jit
    def step(state, lr):
        return tx.update(GRADS, optax.tree_utils.tree_set(state, learning_rate=lr), PARAMS)[0]

    state = tx.init(PARAMS)
    for leaf in jax.tree.leaves(step(state, jnp.float32(written))):
        np.testing.assert_array_equal(leaf, np.zeros_like(leaf))
    np.testing.assert_allclose(step(state, jnp.float32(0.1))["w"], np.full(3, -0.05), rtol=1e-6)  # in range: used
