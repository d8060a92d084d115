"""Issue 40, item 2: a Trainer's checkpoints and hand-outs cost no program whose size grows with
the leaves. The fused layout keeps a few flat buffers; cutting them into N leaves on the device was
a program of N outputs compiled per Trainer (500 leaves of 16 floats: 6.6 s and +450 MB for the
first save; past 10 GB at 10,000). Counted here, not timed: every program lowered while
``save_states``, ``params``, ``state`` and ``load_states`` run, by JAX's own compile log
(`jax.log_compiles`), on Trainers of 20 and 60 leaves: none but ``params``'s programs that cut one
leaf of a given shape from a buffer (shared by every Trainer) and a load's few of a whole buffer. Time and memory:
benchmarks/bench_checkpoint_scale.py."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradxform.trainer import Trainer

_LOGGER = "jax._src.interpreters.pxla"  # logs "Compiling <name> with global shapes and types <avals>"


class _Compiles(logging.Handler):
    """(program name, number of inputs) of every program lowered while attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen: list = []

    def emit(self, record):
        if isinstance(record.msg, str) and record.msg.startswith("Compiling %s") and len(record.args) >= 2:
            self.seen.append((str(record.args[0]), len(record.args[1])))


def _compiles(fn) -> list:
    handler, logger = _Compiles(), logging.getLogger(_LOGGER)
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            fn()
    finally:
        logger.removeHandler(handler)
    return handler.seen


KINDS = {
    "replicated": {},  # the 4 fake CPU devices of conftest, state on every device
    "one device": {"devices": jax.devices()[:1]},
    "sharded": {"update_on_kvstore": True},  # ZeRO-1: the state's shards joined on the host
    "compressed": {"compression_params": {"type": "2bit", "threshold": 0.5}},  # residuals per device
    "per leaf": {"fused": False},
    "per leaf, one device": {"fused": False, "devices": jax.devices()[:1]},  # the stored arrays themselves
}


def _trained(n: int, kw: dict) -> Trainer:
    params = {f"p{i:04d}": jnp.full((16,), 0.01 * i, jnp.float32) for i in range(n)}
    t = Trainer(params, "adam", {"learning_rate": 1e-3, "wd": 1e-4}, **kw)
    rng = np.random.default_rng(n)
    t.step({k: rng.standard_normal((t.num_devices, 16)).astype(np.float32) for k in params}, 4)
    return t


def _counts(t: Trainer, path) -> dict:
    return {"save": _compiles(lambda: t.save_states(path)), "params": _compiles(lambda: t.params),
            "state": _compiles(lambda: t.state), "load": _compiles(lambda: t.load_states(path))}


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_program_grows_with_the_leaves(tmp_path, kind):
    # 20 and 60 leaves: a program with an input per leaf has 60 (the bound below is 20); 200
    # leaves said nothing more, and per leaf cost a 200-leaf Adam compile per kind
    small = _counts(_trained(20, KINDS[kind]), tmp_path / "small")
    big = _trained(60, KINDS[kind])
    first = _counts(big, tmp_path / "big")
    again = _counts(big, tmp_path / "big")
    for what in ("save", "state"):  # host-side reads: nothing compiled at all
        assert first[what] == [] and again[what] == [], (what, first[what], again[what])
    # params: a leaf cut from its buffer by a program per (buffer, leaf shape), shared by all Trainers
    for params in (small["params"], first["params"]):
        assert len(params) <= 2 and all(inputs <= 2 for _, inputs in params), params
    assert again["params"] == []
    # a load places a few flat buffers: a few small programs (JAX's caches may already hold them),
    # none with an input per leaf, and none a second time
    for load in (small["load"], first["load"]):
        assert len(load) <= 4 and all(inputs < 20 for _, inputs in load), load
    assert again["load"] == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_loaded_checkpoint_saves_the_same_bytes_and_the_next_step_still_donates(tmp_path, kind):
    t = _trained(50, KINDS[kind])
    t.save_states(tmp_path / "a")
    params, state = t.params, t.state
    t.load_states(tmp_path / "a")
    t.save_states(tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    jax.tree.map(np.testing.assert_array_equal, (params, state), (t.params, t.state))
    # the host read keeps no reference to a stored buffer, which would stop a step donating it;
    # what was handed out before that step is the caller's: still readable, unchanged
    stored = jax.tree.leaves(t._params)[0]
    t.save_states(tmp_path / "c")
    held = t.params, t.state
    copy = jax.tree.map(np.array, held)
    t.step({k: np.ones((t.num_devices, 16), np.float32) for k in params}, 4)
    assert stored.is_deleted()
    jax.tree.map(np.testing.assert_array_equal, held, copy)


def test_params_of_many_shapes_are_read_on_the_host_with_nothing_compiled():
    # more kinds of leaf than `_host._MAX_TAKES` programs: the host path, the same values
    params = {f"p{i:02d}": jnp.arange(i + 1, dtype=jnp.float32) / (i + 1) for i in range(40)}
    t = Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, devices=jax.devices()[:1])
    t.step({k: np.ones((1,) + v.shape, np.float32) for k, v in params.items()}, 1)
    got = []
    assert _compiles(lambda: got.append(t.params)) == []
    want = jax.tree.map(lambda p: p - np.float32(0.1), params)
    jax.tree.map(np.testing.assert_array_equal, got[0], want)
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(got[0]))
