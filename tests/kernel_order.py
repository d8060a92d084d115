"""Shared by the kernel-order tests: whether XLA contracts here, and a jitted run of a
transformation over one weight vector (the fixtures' layout: ``w0``, ``g[steps]``)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax


def xla_contracts() -> bool:
    """Whether jitted ``a * b + c`` rounds once here (an FMA), as contracted kernels do;
    the kernel-order fixtures are bit-exact where it does, within a few ulps elsewhere."""
    a, b, c = np.float32(1 + 2 ** -12), np.float32(1 - 2 ** -12), np.float32(-1)
    fused = np.float32(np.float64(a) * np.float64(b) + np.float64(c))  # -2**-24, exact
    return float(jax.jit(lambda a, b, c: a * b + c)(a, b, c)) == float(fused)


def run_jitted(tx, w0, grads, *, with_state: bool = False):
    """The weights after each step of ``tx`` (jitted update + apply_updates), stacked;
    ``with_state``: and the state after the last step."""
    params = {"w": jnp.asarray(w0)}
    state = tx.init(params)

    @jax.jit
    def step(params, state, g):
        updates, state = tx.update({"w": g}, state, params)
        return optax.apply_updates(params, updates), state

    out = []
    for g in grads:
        params, state = step(params, state, jnp.asarray(g))
        out.append(np.asarray(params["w"]))
    return (np.stack(out), state) if with_state else np.stack(out)


def assert_kernel_trajectory(ours, theirs, what: str, maxulp: int = 4):
    """Bit for bit where XLA contracts as the kernels do (``xla_contracts``); otherwise
    within ``maxulp`` where finite. inf/NaN at the same places either way."""
    if xla_contracts():
        for t in range(len(ours)):
            np.testing.assert_array_equal(ours[t], theirs[t], err_msg=f"{what}, step {t + 1}")
    else:
        finite = np.isfinite(theirs)
        np.testing.assert_array_max_ulp(ours[finite], theirs[finite], maxulp=maxulp)
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(theirs), err_msg=f"{what}: where inf/NaN arise")
