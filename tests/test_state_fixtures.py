"""Every registered optimizer's state as it was laid out before issue 37's layout work
(tests/fixtures/state_v1, written by tools/state_fixtures.py): it still loads into the optimizer
built from its tests/cases.py row, and the next update gives the parameters that code recorded,
bit for bit (the same update, op by op, as when it was recorded). A layout change must keep these
loading (a converter where the fields moved), not regenerate them."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import cases
import gradxform

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "state_v1")
PARAMS = {"b": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "w": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32)}
RECORDED = sorted(f[:-len(".gxckpt")] for f in os.listdir(FIXTURES) if f.endswith(".gxckpt"))


def test_the_recording_covers_registered_optimizers():
    # a recorded optimizer stays registered (removing one is a decision, not an accident); one added
    # after the recording has no earlier layout to keep, so it needs no fixture
    assert RECORDED and set(RECORDED) <= set(cases.names()), sorted(set(RECORDED) - set(cases.names()))


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_state_loads_and_continues_as_recorded(name):
    tx = cases.create(name)
    like = {"params": PARAMS, "state": tx.init(PARAMS)}
    loaded = gradxform.load_state(os.path.join(FIXTURES, f"{name}.gxckpt"), like=like)
    grads = jax.tree.map(lambda p: jnp.sin(p * 4) + 0.3, PARAMS)  # tools/state_fixtures.py's grads(3)
    u, _ = tx.update(grads, loaded["state"], loaded["params"])
    got = optax.apply_updates(loaded["params"], u)
    want = np.load(os.path.join(FIXTURES, f"{name}.npz"))
    for k in PARAMS:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"{name} {k}")
