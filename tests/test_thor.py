"""MindSpore THOR (gradxform/mindspore/_thor.py) and its statistics capture (thor_capture.py).

Checked against a float64 NumPy transcription of the TinyMS seed's rule
(``003_*.txt``: m = momentum m + (G + damping I)^-1 g (A + damping I)^-1,
w -= lr m, with MindSpore's order: unscale, precondition, decay, momentum),
not against MindSpore: THOR has no CPU kernel to record goldens from. The
runs are in float64 with float32-exact hyperparameters (hyperparameters are
float32 state), so the transcription agrees to rounding: rtol 1e-9.
"""
from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import gradxform as gx
from gradxform.mindspore.thor_capture import Tap, capture, capture_linen, conv_patches
import quick_compile

# one compile per model (the tests run many steps), a quick one: float64 compared within tolerances
cap = quick_compile.jit(capture, static_argnums=0)

RTOL = 1e-9  # float64 on both sides; differences are summation order only


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


# -- models (pure JAX; the tap reports each THOR layer) -------------------------------

def mlp_init(key):
    k1, k2 = jax.random.split(key)
    return {"l1": {"kernel": jax.random.normal(k1, (8, 6)) * 0.5, "bias": jnp.zeros(6)},
            "l2": {"kernel": jax.random.normal(k2, (6, 3)) * 0.5, "bias": jnp.zeros(3)}}


def xent(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def mlp_loss(p, x, y, scale, *, tap):
    h = jnp.tanh(tap("l1/kernel", x, x @ p["l1"]["kernel"]) + p["l1"]["bias"])
    return scale * xent(tap("l2/kernel", h, h @ p["l2"]["kernel"]) + p["l2"]["bias"], y)


def cnn_init(key):
    k1, k2 = jax.random.split(key)
    return {"conv": {"kernel": jax.random.normal(k1, (3, 3, 2, 4)) * 0.3, "bias": jnp.zeros(4)},
            "out": {"kernel": jax.random.normal(k2, (4 * 4 * 4, 3)) * 0.1, "bias": jnp.zeros(3)}}


def cnn_loss(p, x, y, scale, *, tap):
    y1 = jax.lax.conv_general_dilated(x, p["conv"]["kernel"], (1, 1), "VALID",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jax.nn.relu(tap("conv/kernel", conv_patches(x, (3, 3), padding="VALID"), y1) + p["conv"]["bias"])
    h = h.reshape(h.shape[0], -1)
    return scale * xent(tap("out/kernel", h, h @ p["out"]["kernel"]) + p["out"]["bias"], y)


MLP = dict(init=mlp_init, loss=mlp_loss, x=(16, 8), layers={"l1/kernel": "dense", "l2/kernel": "dense"})
CNN = dict(init=cnn_init, loss=cnn_loss, x=(8, 6, 6, 2), layers={"conv/kernel": "conv", "out/kernel": "dense"})


def batch(model, t):
    kx, ky = jax.random.split(jax.random.PRNGKey(100 + t))
    x = jax.random.normal(kx, model["x"])
    return x, jax.random.randint(ky, (model["x"][0],), 0, 3)


# -- the seed's rule in NumPy, float64 ---------------------------------------------------

def block_inv(m, block):
    if block is None:
        return np.linalg.inv(m)
    out = np.zeros_like(m)
    for s in range(0, m.shape[0], block):
        e = min(s + block, m.shape[0])
        out[s:e, s:e] = np.linalg.inv(m[s:e, s:e])
    return out


def np_thor(params, grads, stats, kinds, *, lr, damping, momentum, wd, ls, bs, freq, nesterov=False,
            factor_damping="seed", block=None):
    """The seed's THOR over the stored per-step gradients and (a, D), Flax layout."""
    w = {n: np.asarray(v, np.float64) for n, v in params.items()}
    v = {n: np.zeros_like(x) for n, x in w.items()}
    a_inv, g_inv, traj = {}, {}, []
    for t, (gt, st) in enumerate(zip(grads, stats)):
        lam, alpha = damping[min(t, len(damping) - 1)], lr[min(t, len(lr) - 1)]
        shift = lam if factor_damping == "seed" else np.sqrt(lam)
        for n in w:
            g = np.asarray(gt[n], np.float64) / ls
            if n in kinds:
                q = g.shape[-1]
                if t % freq == 0:
                    a = np.asarray(st[n]["a"], np.float64).reshape(-1, g.size // q)
                    d = np.asarray(st[n]["D"], np.float64).reshape(-1, q)
                    A = a.T @ a / a.shape[0]
                    G = d.T @ d / d.shape[0] * bs ** 2 / ls ** 2
                    a_inv[n] = block_inv(A + shift * np.eye(len(A)), block)
                    g_inv[n] = block_inv(G + shift * np.eye(q), block)
                g = (a_inv[n] @ g.reshape(-1, q) @ g_inv[n]).reshape(g.shape)
            g = g + wd * w[n]
            v[n] = momentum * v[n] + g
            w[n] = w[n] - alpha * (g + momentum * v[n] if nesterov else v[n])
        traj.append({n: x.copy() for n, x in w.items()})
    return traj


def flat(p):
    return {"/".join(gx._tree.key_name(k) for k in path): x for path, x in jax.tree_util.tree_flatten_with_path(p)[0]}


def run_gx(model, steps, **kw):
    """THOR in gradxform over `steps` batches; returns the trajectory and the stored grads / stats."""
    ls, kinds = kw.get("loss_scale", 1.0), model["layers"]
    tx = gx.create("mindspore.thor", layers=kinds, **kw)
    params = model["init"](jax.random.PRNGKey(0))
    p0, state = flat(params), tx.init(params)
    step = quick_compile.jit(lambda p, s, g, st: tx.update(g, s, p, layer_stats=st))
    grads, stats, traj, states = [], [], [], []
    for t in range(steps):
        x, y = batch(model, t)
        _, g, st = cap(model["loss"], params, x, y, ls)
        u, state = step(params, state, g, st)
        params = gx.apply_updates(params, u)
        grads.append(flat(g))
        stats.append(st)
        traj.append(flat(params))
        states.append(state)
    return p0, grads, stats, traj, states


def find(state, field):
    out = []

    def go(node):
        if type(node).__name__ == "ThorState":
            out.append(getattr(node, field))
        elif isinstance(node, tuple):
            for c in node:
                go(c)
    go(state)
    return out[0]


HYPER = dict(learning_rate=[0.25, 0.125, 0.125, 0.0625], damping=[0.5, 0.25, 0.125, 0.0625, 0.03125],
             momentum=0.875, weight_decay=2.0 ** -10, loss_scale=4.0, batch_size=16, frequency=3)


@pytest.mark.parametrize("model,nesterov", [(MLP, False), (MLP, True), (CNN, False)], ids=["mlp", "mlp-nesterov", "cnn"])
def test_matches_float64_transcription_of_the_seed(model, nesterov):
    kw = dict(HYPER, use_nesterov=nesterov, batch_size=model["x"][0])
    p0, grads, stats, traj, _ = run_gx(model, 10, **kw)
    ref = np_thor(p0, grads, stats, model["layers"], lr=kw["learning_rate"], damping=kw["damping"],
                  momentum=kw["momentum"], wd=kw["weight_decay"], ls=kw["loss_scale"], bs=kw["batch_size"],
                  freq=kw["frequency"], nesterov=nesterov)
    for t, (got, want) in enumerate(zip(traj, ref)):
        for n in want:
            np.testing.assert_allclose(np.asarray(got[n]), want[n], rtol=RTOL, atol=1e-13, err_msg=f"step {t}: {n}")
    assert not np.allclose(traj[-1]["l1/kernel" if model is MLP else "conv/kernel"],
                           p0["l1/kernel" if model is MLP else "conv/kernel"])


def test_mindspore_options_sqrt_damping_and_128_wide_blocks():
    """factor_damping='sqrt' (sqrt(damping) on each factor) and block-diagonal
    inverses (blocks of 4 here: the CNN's conv factor is 18 wide, its dense one 64)."""
    kw = dict(HYPER, batch_size=8, factor_damping="sqrt", block_size=4)
    p0, grads, stats, traj, _ = run_gx(CNN, 4, **kw)
    ref = np_thor(p0, grads, stats, CNN["layers"], lr=kw["learning_rate"], damping=kw["damping"],
                  momentum=kw["momentum"], wd=kw["weight_decay"], ls=kw["loss_scale"], bs=8, freq=3,
                  factor_damping="sqrt", block=4)
    for got, want in zip(traj, ref):
        for n in want:
            np.testing.assert_allclose(np.asarray(got[n]), want[n], rtol=RTOL, atol=1e-13, err_msg=n)


def test_inverses_change_only_at_cycle_starts():
    *_, states = run_gx(MLP, 8, **dict(HYPER, frequency=3))
    inv = [np.asarray(find(s, "a_inv")["l1/kernel"]) for s in states]
    changed = [t for t in range(1, 8) if not np.array_equal(inv[t], inv[t - 1])]
    assert changed == [3, 6]
    assert not np.allclose(inv[0], np.eye(8))  # step 0 starts a cycle too


def _updates(damping, lr, steps=4):
    tx = gx.create("mindspore.thor", learning_rate=lr, damping=damping, momentum=0.0, frequency=2,
                   layers=MLP["layers"], batch_size=16)
    params = MLP["init"](jax.random.PRNGKey(0))
    state, out = tx.init(params), []
    step = jax.jit(lambda s, g, st: tx.update(g, s, params, layer_stats=st))
    for t in range(steps):
        _, g, st = cap(MLP["loss"], params, *batch(MLP, t), 1.0)
        u, state = step(state, g, st)
        out.append(flat(u))
    return out


def test_lr_and_damping_are_read_at_the_step_index():
    """Update t reads lr[t] and damping[t] (MindSpore's global_step before its
    increment); damping only at cycle starts (frequency 2: steps 0 and 2)."""
    base = _updates([0.5, 0.5, 0.25, 0.25], [0.25, 0.125, 0.0625, 0.0625])
    # damping at steps 1 and 3 is never read; lr[1] x4 scales update 1 only (momentum 0, no decay)
    changed = _updates([0.5, 9.0, 0.25, 9.0], [0.25, 0.5, 0.0625, 0.0625])
    for t in (0, 2, 3):
        jax.tree.map(np.testing.assert_array_equal, changed[t], base[t])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, 4 * b, rtol=1e-12), changed[1], base[1])
    # damping at step 2 (a cycle start) is read, there and on step 3 (same cycle)
    other = _updates([0.5, 0.5, 0.125, 0.25], [0.25, 0.125, 0.0625, 0.0625])
    assert np.array_equal(base[1]["l1/kernel"], other[1]["l1/kernel"])
    assert not np.allclose(base[2]["l1/kernel"], other[2]["l1/kernel"])
    assert not np.allclose(base[3]["l1/kernel"], other[3]["l1/kernel"])


def test_factored_preconditioner_equals_explicit_kronecker_solve():
    rng = np.random.default_rng(0)
    a, d, g = rng.normal(size=(20, 5)), rng.normal(size=(20, 3)), rng.normal(size=(5, 3))
    lam = 0.25
    tx = gx.create("mindspore.thor", learning_rate=1.0, damping=lam, momentum=0.0, batch_size=20,
                   layers={"w": "dense"})
    u, _ = tx.update({"w": jnp.asarray(g)}, tx.init({"w": jnp.zeros((5, 3))}), {"w": jnp.zeros((5, 3))},
                     layer_stats={"w": {"a": jnp.asarray(a), "D": jnp.asarray(d)}})
    A = a.T @ a / 20 + lam * np.eye(5)
    G = d.T @ d * 20 + lam * np.eye(3)          # / rows * batch_size^2
    explicit = np.linalg.solve(np.kron(A, G), g.reshape(-1)).reshape(5, 3)
    np.testing.assert_allclose(-np.asarray(u["w"]), explicit, rtol=1e-12, atol=1e-14)
    # out_in layout (MindSpore's (out, in) weights): G^-1 g A^-1
    tx = gx.create("mindspore.thor", learning_rate=1.0, damping=lam, momentum=0.0, batch_size=20,
                   layers={"w": "dense"}, layout="out_in")
    u, _ = tx.update({"w": jnp.asarray(g.T)}, tx.init({"w": jnp.zeros((3, 5))}), {"w": jnp.zeros((3, 5))},
                     layer_stats={"w": {"A": jnp.asarray(A - lam * np.eye(5)), "G": jnp.asarray(G - lam * np.eye(3))}})
    np.testing.assert_allclose(-np.asarray(u["w"]), explicit.T, rtol=1e-12, atol=1e-14)


def test_embedding_and_layernorm_rules():
    """Embedding: diag(counts / batch_size + damping)^-1 g (G + damping I)^-1; layernorm
    (MindSpore's _process_layernorm): g / (g^2 / batch_size + sqrt(damping))."""
    rng = np.random.default_rng(1)
    ids, d = rng.integers(0, 6, size=(4, 5)), rng.normal(size=(4, 5, 3))
    g_e, g_n = rng.normal(size=(6, 3)), rng.normal(size=(3,))
    lam, bs = 0.25, 4
    tx = gx.create("mindspore.thor", learning_rate=1.0, damping=lam, momentum=0.0, batch_size=bs,
                   layers={"emb": "embedding", "ln": "layernorm"})
    p = {"emb": jnp.zeros((6, 3)), "ln": jnp.zeros(3)}
    u, _ = tx.update({"emb": jnp.asarray(g_e), "ln": jnp.asarray(g_n)}, tx.init(p), p,
                     layer_stats={"emb": {"a": jnp.asarray(ids), "D": jnp.asarray(d)}})
    counts = np.bincount(ids.ravel(), minlength=6)
    D = d.reshape(-1, 3)
    G = D.T @ D / 20 * bs ** 2 + lam * np.eye(3)
    np.testing.assert_allclose(-np.asarray(u["emb"]), (g_e / (counts / bs + lam)[:, None]) @ np.linalg.inv(G),
                               rtol=1e-12)
    np.testing.assert_allclose(-np.asarray(u["ln"]), g_n / (g_n ** 2 / bs + np.sqrt(lam)), rtol=1e-12)


# -- the capture: grad W = sum_rows a_r^T D_r ----------------------------------------------

def test_capture_outer_product_identity_dense_and_conv():
    for model in (MLP, CNN):
        params = model["init"](jax.random.PRNGKey(1))
        x, y = batch(model, 0)
        loss, g, st = cap(model["loss"], params, x, y, 4.0)   # the shapes of the runs above: no compile
        ref_loss, ref_g = jax.jit(jax.value_and_grad(lambda p: model["loss"](p, x, y, 4.0, tap=Tap())))(params)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-14)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15), g, ref_g)
        for name in model["layers"]:
            a, d = st[name]["a"], st[name]["D"]
            w = flat(g)[name]
            outer = jnp.einsum("ri,ro->io", a.reshape(-1, a.shape[-1]), d.reshape(-1, d.shape[-1]))
            np.testing.assert_allclose(outer.reshape(w.shape), w, rtol=1e-12, atol=1e-15, err_msg=name)


def test_conv_patches_out_in_layout_matches_oihw_kernels():
    x = jax.random.normal(jax.random.PRNGKey(2), (2, 3, 5, 5))          # NCHW
    k = jax.random.normal(jax.random.PRNGKey(3), (4, 3, 3, 3))          # OIHW
    y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    via = jax.jit(lambda x, k: jnp.einsum("nhwf,of->nohw", conv_patches(x, (3, 3), padding="SAME", layout="out_in"),
                                          k.reshape(4, -1)))
    np.testing.assert_allclose(via(x, k), y, rtol=1e-12, atol=1e-13)


def test_capture_linen_and_equinox():
    nn = pytest.importorskip("flax.linen")

    class Net(nn.Module):
        @nn.compact
        def __call__(self, ids, img):
            e = nn.Embed(7, 3)(ids).sum(1)
            c = nn.relu(nn.Conv(4, (3, 3), padding="SAME", strides=2)(img)).mean((1, 2))
            return nn.Dense(3)(jnp.concatenate([e, c], -1))

    ids = jax.random.randint(jax.random.PRNGKey(4), (5, 2), 0, 7)
    img = jax.random.normal(jax.random.PRNGKey(5), (5, 6, 6, 2))
    y = jnp.arange(5) % 3
    net = Net()
    params = jax.tree.map(lambda p: p.astype(jnp.float64), net.init(jax.random.PRNGKey(6), ids, img)["params"])
    loss_fn = lambda p: xent(net.apply({"params": p}, ids, img), y)  # noqa: E731
    _, g, st = jax.jit(capture_linen, static_argnums=0)(loss_fn, params)
    assert sorted(st) == ["Conv_0/kernel", "Dense_0/kernel", "Embed_0/embedding"]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12), g, jax.grad(loss_fn)(params))
    fg = flat(g)
    for name in ("Conv_0/kernel", "Dense_0/kernel"):
        a, d = st[name]["a"], st[name]["D"]
        outer = jnp.einsum("ri,ro->io", a.reshape(-1, a.shape[-1]), d.reshape(-1, d.shape[-1]))
        np.testing.assert_allclose(outer.reshape(fg[name].shape), fg[name], rtol=1e-12, atol=1e-15)
    emb = jnp.zeros((7, 3)).at[st["Embed_0/embedding"]["a"].reshape(-1)].add(
        st["Embed_0/embedding"]["D"].reshape(-1, 3))
    np.testing.assert_allclose(emb, fg["Embed_0/embedding"], rtol=1e-12, atol=1e-15)

    eqx = pytest.importorskip("equinox")

    class MLP2(eqx.Module):
        l1: eqx.nn.Linear
        l2: eqx.nn.Linear

        def __call__(self, x, tap):   # x: (batch, 4); Equinox weights are (out, in)
            h = jnp.tanh(tap("l1/weight", x, x @ self.l1.weight.T) + self.l1.bias)
            return tap("l2/weight", h, h @ self.l2.weight.T) + self.l2.bias

    m = MLP2(eqx.nn.Linear(4, 5, key=jax.random.PRNGKey(7)), eqx.nn.Linear(5, 3, key=jax.random.PRNGKey(8)))
    x = jax.random.normal(jax.random.PRNGKey(9), (6, 4))
    _, g, st = cap(lambda mod, *, tap: xent(mod(x, tap), jnp.arange(6) % 3), m)
    for name, w in (("l1/weight", g.l1.weight), ("l2/weight", g.l2.weight)):
        np.testing.assert_allclose(st[name]["D"].T @ st[name]["a"], w, rtol=1e-12, atol=1e-15)
    tx = gx.create("mindspore.thor", learning_rate=0.1, damping=0.1, momentum=0.9, batch_size=6,
                   layers={"*/weight": "dense"}, layout="out_in")
    u, _ = jax.jit(lambda g, s, st: tx.update(g, s, m, layer_stats=st))(g, tx.init(m), st)
    assert np.all(np.isfinite(u.l1.weight))


# -- errors ----------------------------------------------------------------------------------

def test_update_without_statistics_names_what_to_pass():
    tx = gx.create("mindspore.thor", learning_rate=0.1, damping=0.1, momentum=0.9, layers=MLP["layers"])
    params = MLP["init"](jax.random.PRNGKey(0))
    state = tx.init(params)
    with pytest.raises(ValueError, match=r"needs layer_stats=: for each THOR layer \['l1/kernel', 'l2/kernel'\]"):
        tx.update(params, state, params)
    with pytest.raises(ValueError, match=r"layer_stats must have exactly the THOR layers"):
        tx.update(params, state, params, layer_stats={"l1/kernel": {"A": jnp.eye(8), "G": jnp.eye(6)}})
    with pytest.raises(ValueError, match=r"layer_stats\['l1/kernel'\]: A must have shape \(8, 8\)"):
        tx.update(params, state, params, layer_stats={"l1/kernel": {"A": jnp.eye(6), "G": jnp.eye(6)},
                                                      "l2/kernel": {"A": jnp.eye(6), "G": jnp.eye(3)}})


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(frequency=1), ValueError, "frequency must be at least 2; got 1"),
    (dict(frequency=2.0), TypeError, "frequency must be an int"),
    (dict(momentum=1), TypeError, "momentum must be a float"),
    (dict(momentum=-0.5), ValueError, "momentum must be in"),
    (dict(loss_scale=0.0), ValueError, "loss_scale must be in"),
    (dict(loss_scale=2), TypeError, "loss_scale must be a float"),
    (dict(weight_decay=-1.0), ValueError, "weight_decay must be in"),
    (dict(use_nesterov=1), TypeError, "use_nesterov must be a bool"),
    (dict(damping=-1.0), ValueError, "damping must be in"),
    (dict(damping=[0.1, -1.0]), ValueError, "every value must be a finite number >= 0"),
    (dict(layers={"l1/kernel": "lstm"}), ValueError, "kinds must be one of"),
    (dict(layout="oi"), ValueError, "layout=...): must be 'in_out' or 'out_in'"),
    (dict(block_size=0), ValueError, "block_size=...): must be None or a positive int"),
    # issue 28 (mutants of the checks): each bound's other side, and the cases an `and`/`any` lets through
    (dict(block_size=True), ValueError, "block_size=...): must be None or a positive int"),
    (dict(block_size=2.5), ValueError, "block_size=...): must be None or a positive int"),
    (dict(batch_size=0), ValueError, "batch_size=...): must be a positive int"),
    (dict(batch_size=True), ValueError, "batch_size=...): must be a positive int"),
    (dict(batch_size=2.5), ValueError, "batch_size=...): must be a positive int"),
    (dict(split_indices=[-1]), TypeError, "split_indices=...): must be None or a list of ints >= 0"),
    (dict(split_indices=[0, -1]), TypeError, "split_indices=...): must be None or a list of ints >= 0"),
    (dict(split_indices=[True]), TypeError, "split_indices=...): must be None or a list of ints >= 0"),
    (dict(split_indices=[1.5]), TypeError, "split_indices=...): must be None or a list of ints >= 0"),
    (dict(layers={1: "dense"}), TypeError, "layers=...): must map parameter names or glob patterns"),
    (dict(layers={"l1/kernel": "dense", 2: "dense"}), TypeError, "layers=...): must map parameter names"),
    (dict(damping=[[0.1, 0.2]]), ValueError, "a damping array must be a non-empty 0-D or 1-D"),
    (dict(damping=[]), ValueError, "a damping array must be a non-empty 0-D or 1-D"),
    (dict(damping=[0.1, float("nan")]), ValueError, "every value must be a finite number >= 0"),
])
def test_construction_errors(kwargs, err, match):
    base = dict(learning_rate=0.1, damping=0.1, momentum=0.9, layers=MLP["layers"])
    with pytest.raises(err, match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        gx.create("mindspore.thor", **{**base, **kwargs})


def test_layer_names_are_checked_at_init():
    params = MLP["init"](jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"layers\['l3/kernel'\] names no parameter"):
        gx.create("mindspore.thor", learning_rate=0.1, damping=0.1, momentum=0.9,
                  layers={"l3/kernel": "dense"}).init(params)
    with pytest.raises(ValueError, match=r"'conv', which needs a 4-D parameter; 'l1/kernel' has shape \(8, 6\)"):
        gx.create("mindspore.thor", learning_rate=0.1, damping=0.1, momentum=0.9,
                  layers={"l1/kernel": "conv"}).init(params)


# -- the digits example: THOR reaches Momentum's accuracy in no more epochs --------------------

def test_digits_example_fast_thor_reaches_momentum_accuracy_in_no_more_epochs(tmp_path):
    import importlib.util  # noqa: PLC0415
    import os  # noqa: PLC0415
    import re  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("sklearn is not installed (pip install -e '.[test]')")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(root / "examples" / "thor_digits.py"), "--fast"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    m = re.search(r"epochs to target: momentum (\d+|None), thor (\d+|None)", out)
    assert m and m.group(1) != "None" and m.group(2) != "None", out[-2000:]
    assert int(m.group(2)) <= int(m.group(1)), out[-2000:]


def test_statistics_with_no_rows_are_refused_at_trace_time():
    # E[D D^T] over zero samples would be 0/0: NaN inverses, then NaN momentum
    tx = gx.create("mindspore.thor", learning_rate=0.1, damping=0.1, momentum=0.9, batch_size=4,
                   layers={"w": "dense"})
    params = {"w": jnp.ones((5, 3))}
    state = tx.init(params)
    empty = {"w": {"a": jnp.zeros((0, 5)), "D": jnp.zeros((0, 3))}}
    step = jax.jit(lambda s, st: tx.update(params, s, params, layer_stats=st))
    with pytest.raises(ValueError, match=r"layer_stats\['w'\]\['D'\]: has no rows"):
        step(state, empty)


# -- issue 28 (mutation testing of _thor.py): edges the runs above do not reach --------------------

def _ms(**kw):
    return gx.create("mindspore.thor", **{**dict(learning_rate=0.1, damping=0.1, momentum=0.9, layers={"w": "dense"}),
                                          **kw})


def test_bounds_themselves_are_accepted():
    """Each documented bound is inclusive: block_size 1, split_indices of ints >= 0 (0 and an empty
    list included), a damping list holding 0, a 0-D damping array read as its number."""
    params = {"w": jnp.zeros((5, 3))}
    for kw in (dict(block_size=1), dict(split_indices=[0, 3]), dict(split_indices=()), dict(damping=[0.0, 0.5])):
        _ms(**kw).init(params)
    assert float(find(_ms(damping=np.array(0.25)).init(params), "hyper")["damping"]) == 0.25
    # a schedule without a reference value (a plain function) is read as it is: base 1
    # (schedules/_common.py: "exactly 1 with the reference value itself")
    assert float(find(_ms(damping=lambda step: 0.25 + 0.0 * step).init(params), "hyper")["damping"]) == 1.0


def test_glob_patterns_select_layers_and_an_exact_name_wins():
    params = MLP["init"](jax.random.PRNGKey(0))
    state = _ms(layers={"*/kernel": "dense"}).init(params)   # the biases are 1-D: not matched
    assert sorted(find(state, "a_inv")) == ["l1/kernel", "l2/kernel"]
    state = _ms(layers={"*/kernel": "dense", "l1/kernel": "layernorm"}).init(params)
    assert sorted(find(state, "a_inv")) == ["l2/kernel"]


def test_one_sample_statistics_and_malformed_ones():
    """A 1-D ``a`` and ``D`` are one row (``(..., n_in)``): A = a a^T, G = D D^T bs^2 / ls^2, each
    + damping I, at batch_size 1 (its bound). Malformed statistics are refused naming the entry."""
    rng = np.random.default_rng(2)
    a, d, g, lam = rng.normal(size=5), rng.normal(size=3), rng.normal(size=(5, 3)), 0.25
    tx = _ms(learning_rate=1.0, damping=lam, momentum=0.0, batch_size=1)
    p = {"w": jnp.zeros((5, 3))}
    state = tx.init(p)
    u, _ = tx.update({"w": jnp.asarray(g)}, state, p, layer_stats={"w": {"a": jnp.asarray(a), "D": jnp.asarray(d)}})
    want = np.linalg.inv(np.outer(a, a) + lam * np.eye(5)) @ g @ np.linalg.inv(np.outer(d, d) + lam * np.eye(3))
    np.testing.assert_allclose(-np.asarray(u["w"]), want, rtol=1e-10, atol=1e-14)
    a20, d20 = jnp.asarray(rng.normal(size=(20, 5))), jnp.asarray(rng.normal(size=(20, 3)))
    for st, match in [({"a": a20, "D": d20[:, :2]}, r"\['D'\]: the last axis must be the layer's 3 outputs"),
                      ({"a": a20.T, "D": d20}, r"\['a'\]: must be 20 rows of the layer's 5 inputs"),
                      ({"a": a20[:19], "D": d20}, r"\['a'\]: must be 20 rows of the layer's 5 inputs")]:
        with pytest.raises(ValueError, match=match):
            tx.update({"w": jnp.asarray(g)}, state, p, layer_stats={"w": st})
    te = _ms(layers={"e": "embedding"})
    pe = {"e": jnp.zeros((6, 3))}
    with pytest.raises(ValueError, match=r"\['a'\]: an embedding's 'a' are its integer ids, one per row of D \(20\)"):
        te.update(pe, te.init(pe), pe, layer_stats={"e": {"a": jnp.zeros((4, 5)), "D": jnp.zeros((4, 5, 3))}})


def test_enable_clip_grad_clips_each_leaf_to_norm_one():
    """MindSpore's ``clip_gradient`` (mindspore/nn/optim/thor.py lines 67-105: GRADIENT_CLIP_TYPE 1,
    GRADIENT_CLIP_VALUE 1.0, each gradient through ``nn.ClipByNorm``): X unchanged when ||X|| <= 1,
    else clip_norm * X / ||X|| (mindspore/nn/layer/basic.py, ClipByNorm's docstring)."""
    g = {"big": jnp.asarray([3.0, 4.0]), "mid": jnp.asarray([0.9, 1.2]), "small": jnp.asarray([0.3, 0.4])}
    tx = _ms(learning_rate=1.0, momentum=0.0, enable_clip_grad=True, layers={})
    u, _ = tx.update(g, tx.init(g), jax.tree.map(jnp.zeros_like, g))
    for n, want in (("big", [0.6, 0.8]), ("mid", [0.6, 0.8]), ("small", [0.3, 0.4])):
        np.testing.assert_allclose(-np.asarray(u[n]), want, rtol=1e-15, err_msg=n)


def test_defaults_neither_clip_nor_skip_nor_scale():
    """MindSpore's defaults (thor(..., weight_decay=0.0, loss_scale=1.0, enable_clip_grad=False)) with
    momentum 0 and lr 1: the update is -g, a big or non-finite gradient included (ThorGpu.construct
    has no skip: gradxform's skip_nonfinite is off by default)."""
    g = {"big": jnp.asarray([3.0, 4.0]), "nan": jnp.asarray([np.nan, 1.0])}
    tx = _ms(learning_rate=1.0, momentum=0.0, layers={})
    u, _ = tx.update(g, tx.init(g), jax.tree.map(jnp.ones_like, g))
    np.testing.assert_array_equal(-np.asarray(u["big"]), [3.0, 4.0])
    np.testing.assert_array_equal(-np.asarray(u["nan"]), [np.nan, 1.0])


def test_capture_linen_conv_options_and_refusals():
    """`capture_linen`'s Conv handling, by shapes (jax.eval_shape: nothing compiles): int, per-side and
    pair paddings, strides None (flax: 1), a (1, 1) dilation are taken, each giving one row of ``a``
    per output position (``a`` and ``D`` agree on every axis but the last); 1-D, grouped and dilated
    convolutions and other padding strings are refused, as the docstring says."""
    nn = pytest.importorskip("flax.linen")

    class Net(nn.Module):
        conv: tuple

        @nn.compact
        def __call__(self, x):
            return nn.Conv(4, **dict(self.conv))(x)

    def stats(x, **conv):
        net = Net(tuple(sorted(conv.items())))
        params = jax.eval_shape(net.init, jax.random.PRNGKey(0), x)["params"]
        _, _, st = jax.eval_shape(lambda p, x: capture_linen(lambda q: jnp.sum(net.apply({"params": q}, x)), p),
                                  params, x)
        return st["Conv_0/kernel"]["a"].shape, st["Conv_0/kernel"]["D"].shape

    x = jax.ShapeDtypeStruct((2, 6, 6, 3), jnp.float32)
    for conv, rows in [(dict(padding=1), (2, 6, 6)), (dict(padding=((1, 1), (0, 0))), (2, 6, 4)),
                       (dict(padding=(1, 1)), (2, 6, 6)), (dict(strides=None), (2, 6, 6)),
                       (dict(strides=2), (2, 3, 3)), (dict(kernel_dilation=(1, 1)), (2, 6, 6))]:
        a, d = stats(x, kernel_size=(3, 3), **conv)
        assert (a, d) == (rows + (27,), rows + (4,)), conv
    for xs, conv, match in [
            (jax.ShapeDtypeStruct((2, 6, 3), jnp.float32), dict(kernel_size=(3,)), "only 2-D convolutions"),
            (jax.ShapeDtypeStruct((2, 6, 3), jnp.float32), dict(kernel_size=3), "only 2-D convolutions"),
            (jax.ShapeDtypeStruct((2, 6, 6, 4), jnp.float32), dict(kernel_size=(3, 3), feature_group_count=2),
             "only 2-D convolutions"),
            (x, dict(kernel_size=(3, 3), kernel_dilation=2), "only 2-D convolutions without dilation"),
            (x, dict(kernel_size=(3, 3), padding="CIRCULAR"), "padding 'CIRCULAR' is not supported")]:
        with pytest.raises(ValueError, match=match):
            stats(xs, **conv)
