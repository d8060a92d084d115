"""The per-element rule pieces (gradxform/pieces/_rules.py) at the edges the families never
reach (issue 28, mutation run in docs/mutation.md): MindSpore's and MXNet's optimizers check
their own arguments and pass every hyperparameter, so the pieces' own defaults and range
checks were untested.

* Defaults are the frameworks' (each cited): a piece used on its own behaves as the optimizer
  it was written from does with that optimizer's defaults. Where the piece needs no step
  context, numerically, against a float64 transcription or optax; otherwise the signature.
* Ranges, as the docstrings state them.
"""
import contextlib
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform import pieces as X
from gradxform.pieces.internal import AveragedState

G = [np.random.default_rng(t).standard_normal(5).astype(np.float32) for t in range(3)]


def _run(tx):
    s = tx.init({"w": jnp.asarray(G[0])})
    outs = []
    for g in G:
        u, s = tx.update({"w": jnp.asarray(g)}, s, {"w": jnp.asarray(G[0])})
        outs.append(np.asarray(u["w"], np.float64))
    return outs


def test_infinity_norm_defaults_are_mindspore_adamax():
    # MindSpore nn.AdaMax(beta1=0.9, beta2=0.999, eps=1e-08) (mindspore/nn/optim/adamax.py line 198),
    # kernel ApplyAdaMax: m = b1 m + (1-b1) g; v = max(b2 v, |g|); m / (v + eps); float64 here
    m = v = np.zeros(5)
    for g, got in zip(G, _run(X.scale_by_infinity_norm())):
        g = g.astype(np.float64)
        m, v = 0.9 * m + 0.1 * g, np.maximum(0.999 * v, np.abs(g))
        np.testing.assert_allclose(got, m / (v + 1e-8), rtol=1e-6)


def test_adadelta_defaults_follow_optax():
    # optax.scale_by_adadelta(rho=0.9, eps=1e-6), MindSpore nn.Adadelta's defaults too
    # (mindspore/nn/optim/adadelta.py line 190: rho=0.9, epsilon=1e-6): the same rule
    theirs = optax.scale_by_adadelta()
    s = theirs.init({"w": jnp.asarray(G[0])})
    for g, got in zip(G, _run(X.scale_by_adadelta())):
        u, s = theirs.update({"w": jnp.asarray(g)}, s)
        np.testing.assert_allclose(got, np.asarray(u["w"]), rtol=1e-6)


@pytest.mark.parametrize("piece, defaults", [
    # MindSpore nn.Rprop(etas=(0.5, 1.2), step_sizes=(1e-6, 50.)) (mindspore/nn/optim/rprop.py line 169)
    (X.scale_by_rprop, {"etaminus": 0.5, "etaplus": 1.2, "step_size_min": 1e-6, "step_size_max": 50.0}),
    # MindSpore nn.ASGD(lambd=1e-4, alpha=0.75, t0=1e6) (mindspore/nn/optim/asgd.py line 161)
    (X.averaged_sgd_step, {"lambd": 1e-4, "alpha": 0.75, "t0": 1e6}),
    # MXNet contrib GroupAdaGrad(eps=1e-5) (mxnet/optimizer/contrib.py, GroupAdaGrad.__init__)
    (X.scale_by_row_accumulated_squares, {"eps": 1e-5}),
], ids=["rprop", "asgd", "row_accumulated_squares"])
def test_context_pieces_default_to_their_frameworks(piece, defaults):
    # these need the step's lr and count from a family's head, so their defaults are read off
    # the signature (what a user of the piece gets) and compared with the framework's
    params = inspect.signature(piece).parameters
    assert {k: params[k].default for k in defaults} == defaults


OK, BAD = "ok", "bad"


@pytest.mark.parametrize("make, value, verdict", [
    # betas in [0, 1)
    (lambda v: X.scale_by_infinity_norm(beta1=v), 0.5, OK), (lambda v: X.scale_by_infinity_norm(beta1=v), 1.0, BAD),
    (lambda v: X.scale_by_infinity_norm(beta1=v), 1.5, BAD),
    (lambda v: X.scale_by_infinity_norm(beta2=v), 0.5, OK), (lambda v: X.scale_by_infinity_norm(beta2=v), 1.0, BAD),
    (lambda v: X.scale_by_infinity_norm(beta2=v), 1.5, BAD),
    (lambda v: X.scale_by_infinity_norm(eps=v), 0.0, OK), (lambda v: X.scale_by_infinity_norm(eps=v), -1e-8, BAD),
    (lambda v: X.running_bias_correction(v), 0.5, OK), (lambda v: X.running_bias_correction(v), 1.0, BAD),
    (lambda v: X.running_bias_correction(v), 1.5, BAD),
    # rho in [0, 1]
    (lambda v: X.scale_by_adadelta(rho=v), 1.0, OK), (lambda v: X.scale_by_adadelta(rho=v), 1.5, BAD),
    (lambda v: X.scale_by_adadelta(rho=v), 0.0, OK), (lambda v: X.scale_by_adadelta(rho=v), -0.1, BAD),
    (lambda v: X.scale_by_adadelta(epsilon=v), 0.0, OK), (lambda v: X.scale_by_adadelta(epsilon=v), -1e-6, BAD),
    # etaminus in (0, 1), etaplus > 1, 0 <= step_size_min <= step_size_max
    (lambda v: X.scale_by_rprop(etaminus=v), 0.5, OK), (lambda v: X.scale_by_rprop(etaminus=v), 0.0, BAD),
    (lambda v: X.scale_by_rprop(etaminus=v), 1.0, BAD), (lambda v: X.scale_by_rprop(etaminus=v), 1.5, BAD),
    (lambda v: X.scale_by_rprop(etaplus=v), 1.5, OK), (lambda v: X.scale_by_rprop(etaplus=v), 1.0, BAD),
    (lambda v: X.scale_by_rprop(step_size_min=v), 0.0, OK),
    (lambda v: X.scale_by_rprop(step_size_min=v), -1e-6, BAD),
    (lambda v: X.scale_by_rprop(step_size_min=1e-3, step_size_max=v), 1e-3, OK),
    (lambda v: X.scale_by_rprop(step_size_min=1e-3, step_size_max=v), 1e-4, BAD),
    # lambd, alpha, t0 >= 0
    (lambda v: X.averaged_sgd_step(lambd=v), 0.0, OK), (lambda v: X.averaged_sgd_step(lambd=v), -1e-4, BAD),
    (lambda v: X.averaged_sgd_step(alpha=v), 0.0, OK), (lambda v: X.averaged_sgd_step(alpha=v), -0.5, BAD),
    (lambda v: X.averaged_sgd_step(t0=v), 0.0, OK), (lambda v: X.averaged_sgd_step(t0=v), 0.5, OK),
    (lambda v: X.averaged_sgd_step(t0=v), -1.0, BAD),
    (lambda v: X.scale_by_row_accumulated_squares(v), 0.0, OK),
    (lambda v: X.scale_by_row_accumulated_squares(v), -1e-5, BAD),
])
def test_ranges_as_documented(make, value, verdict):
    with pytest.raises(ValueError) if verdict == BAD else contextlib.nullcontext():
        make(value)


def _averaged(state):
    found = [n for n in jax.tree.leaves(state, is_leaf=lambda n: isinstance(n, AveragedState))
             if isinstance(n, AveragedState)]
    assert len(found) == 1
    return found[0]


def test_asgd_averages_once_t_passes_t0_as_mindspore_does():
    """The running average ``ax`` and the per-parameter ``eta``/``mu`` over 8 steps with t0 = 2,
    so that ``mu`` leaves 1 at t = 4 and the averaging branch runs (at MindSpore's default t0 =
    1e6 it never does), against a float64 transcription of ``nn.ASGD.construct``
    (mindspore/nn/optim/asgd.py): rtol 1e-5 for float32 arithmetic over 8 steps."""
    lr, lambd, alpha, t0 = 0.1, 1e-2, 0.75, 2.0
    tx = gx.create("mindspore.asgd", learning_rate=lr, lambd=lambd, alpha=alpha, t0=t0)
    w32 = {"w": jnp.asarray(G[0])}
    state = tx.init(w32)
    w, eta, mu, ax = G[0].astype(np.float64), 0.0, 1.0, np.zeros(5)
    for t in range(1, 9):
        g = G[t % 3].astype(np.float64)
        u, state = tx.update({"w": jnp.asarray(G[t % 3])}, state, w32)
        w32 = gx.apply_updates(w32, u)
        if t == 1:
            eta = lr
        w = w * (1 - lambd * eta) - eta * g
        ax = ax + (w - ax) * mu if mu != 1 else w
        eta = lr / (1 + lambd * lr * t) ** alpha
        mu = 1 / max(1.0, t - t0)
        got = _averaged(state)
        np.testing.assert_allclose(np.asarray(w32["w"]), w, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(got.ax["w"]), ax, rtol=1e-5)
        np.testing.assert_allclose([float(got.eta[0]), float(got.mu[0])], [eta, mu], rtol=1e-6)
    assert mu == 1 / 6  # the averaging branch ran


def test_row_history_has_one_element_per_row():
    # MXNet GroupAdaGrad.create_state: zeros((weight.shape[0], 1)) for its 2-D weights
    # (mxnet/optimizer/contrib.py); gradxform's docstring extends it: (rows, 1, ...), one
    # element for a 1-D parameter's rows and a 0-d parameter
    params = {"m": jnp.ones((4, 3)), "t": jnp.ones((4, 3, 2)), "v": jnp.ones(5), "s": jnp.ones(())}
    history = X.scale_by_row_accumulated_squares().init(params).trace
    assert {k: v.shape for k, v in history.items()} == {"m": (4, 1), "t": (4, 1, 1), "v": (5,), "s": ()}


def test_row_accumulated_squares_on_every_rank_against_a_transcription():
    """MXNet GroupAdaGrad's dense update, ``state += mean(square(grad), axis=1, keepdims=True);
    grad / sqrt(state + eps)`` (mxnet/optimizer/contrib.py), float64, on the ranks gradxform
    extends it to: a 1-D parameter is MXNet's (n, 1), a 0-d one a single row; rows with no
    elements ((3, 0), (3, 0, 2)) keep their history and give empty updates, not NaN."""
    shapes = {"m": (5, 2), "v": (5,), "s": (), "e": (3, 0), "f": (3, 0, 2)}
    rng = np.random.default_rng(0)
    grads = [{k: rng.standard_normal(sh).astype(np.float32) for k, sh in shapes.items()} for _ in range(3)]
    tx = X.scale_by_row_accumulated_squares(eps=1e-5)
    state = tx.init({k: jnp.zeros(sh) for k, sh in shapes.items()})
    h = {"m": np.zeros((5, 1)), "v": np.zeros(5), "s": np.zeros(()), "e": np.zeros((3, 1)), "f": np.zeros((3, 1, 1))}
    for g in grads:
        out, state = tx.update({k: jnp.asarray(v) for k, v in g.items()}, state)
        for k in ("m", "v", "s"):
            g64 = g[k].astype(np.float64)
            h[k] = h[k] + (np.mean(g64 ** 2, axis=1, keepdims=True) if g64.ndim == 2 else g64 ** 2)
            np.testing.assert_allclose(np.asarray(out[k]), g64 / np.sqrt(h[k] + 1e-5), rtol=1e-6)
        for k in ("e", "f"):
            assert out[k].shape == shapes[k]
    for k in h:
        np.testing.assert_allclose(np.asarray(state.trace[k]), h[k], rtol=1e-6)


def test_asgd_average_is_the_new_weight_itself_until_t_passes_t0():
    # while mu == 1 MindSpore assigns the new weight to ax (`self.assign(ax, param)` after
    # `param = param * (1 - lambd * eta) - eta * grad` in float32, nn.ASGD.construct): bit for
    # bit, not ax + (w_new - ax) * 1, which rounds once the weight moves far (lr 1.0 on 2,000
    # elements). The expected w_new is that float32 line in NumPy (one rounding per operation).
    # gradxform's own weight is w + (w_new - w), an additive update, so it is not compared here.
    rng = np.random.default_rng(1)
    w = rng.standard_normal(2000).astype(np.float32)
    lr, lambd = np.float32(1.0), np.float32(1e-4)
    tx = gx.create("mindspore.asgd", learning_rate=1.0)
    state = tx.init({"w": jnp.asarray(w)})
    eta = lr
    for t in range(1, 4):
        g = rng.standard_normal(2000).astype(np.float32)
        _, state = tx.update({"w": jnp.asarray(g)}, state, {"w": jnp.asarray(w)})
        w = w * (np.float32(1) - lambd * eta) - eta * g
        np.testing.assert_array_equal(np.asarray(_averaged(state).ax["w"]), w)
        eta = np.float32(float(_averaged(state).eta[0]))  # eta itself: test_asgd_averages_once_...
