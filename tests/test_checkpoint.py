"""gradxform.checkpoint: bit-exact round trips, and every bad file is refused with its kind."""
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform.checkpoint import CheckpointError, load_state, read_metadata, save_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def params():
    return {"w": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 7, "b": jnp.full((4,), 0.1, jnp.float32)}


def adam_state():
    tx = gradxform.create("adam", learning_rate=0.01)
    p = params()
    return jax.jit(lambda p: tx.update(jax.tree.map(jnp.ones_like, p), tx.init(p), p)[1])(p)


def bits(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x).tobytes(), np.asarray(x).dtype, np.shape(x)


def assert_bit_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert bits(x) == bits(y)
        assert x.dtype == y.dtype


@pytest.fixture()
def saved(tmp_path):
    state = adam_state()
    path = tmp_path / "adam.ckpt"
    save_state(path, state, meta={"optimizer": "mxnet.adam"})
    return path, state


def test_round_trip_is_bit_exact(saved, tmp_path):
    path, state = saved
    loaded = load_state(path, like=state)
    assert_bit_equal(loaded, state)
    # abstract `like` (eval_shape) works too, and so do keys, bfloat16, NaN payloads and ints
    odd = {"key": jax.random.split(jax.random.key(7), 3), "bf": jnp.array([1.5, -0.0], jnp.bfloat16),
           "nan": jnp.array([np.nan, np.inf, -np.inf], jnp.float32), "i": jnp.arange(5, dtype=jnp.int32),
           "empty": jnp.zeros((0, 3))}
    save_state(tmp_path / "odd.ckpt", odd)
    assert_bit_equal(load_state(tmp_path / "odd.ckpt", like=jax.eval_shape(lambda: odd)), odd)
    assert read_metadata(path) == {"optimizer": "mxnet.adam"}
    assert sorted(load_state(tmp_path / "odd.ckpt")) == ["['bf']", "['empty']", "['i']", "['key']", "['nan']"]


def test_truncated_file_at_several_offsets(saved, tmp_path):
    path, state = saved
    data = path.read_bytes()
    for cut in (0, 7, 16, 31, 32, 60, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.ckpt"
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointError) as err:
            load_state(bad, like=state)
        assert err.value.kind == "truncated", (cut, str(err.value))


def test_flipped_byte_is_corrupt(saved, tmp_path):
    path, state = saved
    data = path.read_bytes()
    for pos in (2, 9, 20, 27, 40, len(data) - 200, len(data) - 1):
        flipped = bytearray(data)
        flipped[pos] ^= 0x04
        bad = tmp_path / f"flip{pos}.ckpt"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError) as err:
            load_state(bad, like=state)
        assert err.value.kind == "corrupt", (pos, str(err.value))
    extra = tmp_path / "extra.ckpt"
    extra.write_bytes(data + b"\0")
    with pytest.raises(CheckpointError, match="unexpected bytes") as err:
        load_state(extra, like=state)
    assert err.value.kind == "corrupt"


def test_file_from_another_optimizer_is_a_mismatch(saved, tmp_path):
    path, _ = saved
    sgd = gradxform.create("sgd", learning_rate=0.1, momentum=0.9).init(params())
    with pytest.raises(CheckpointError, match="another tree") as err:
        load_state(path, like=sgd)
    assert err.value.kind == "mismatch"
    # same structure, other shape
    other = adam_state()
    other_path = tmp_path / "small.ckpt"
    small = gradxform.create("adam").init({"w": jnp.zeros((3, 5)), "b": jnp.zeros(4)})
    save_state(other_path, small)
    with pytest.raises(CheckpointError, match=r"float32\[3,5\] in the file; expected float32\[3,4\]") as err:
        load_state(other_path, like=other)
    assert err.value.kind == "mismatch"
    with pytest.raises(CheckpointError, match="meta") as err:
        load_state(path, like=other, meta={"optimizer": "mxnet.nag"})
    assert err.value.kind == "mismatch"
    assert isinstance(err.value, ValueError)


_WRITER = textwrap.dedent("""
    import os, sys, time
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, {repo!r})
    import numpy as np
    from gradxform import checkpoint

    def stall():
        print("WRITING", flush=True)
        time.sleep(60)

    if {stage!r} == "payload":  # stop after the first 4 MiB chunk of the payload reached the disk
        real_fdopen = os.fdopen

        class Slow:
            def __init__(self, f):
                self.f, self.n = f, 0
            def write(self, b):
                self.n += 1
                out = self.f.write(b)
                if self.n == 4:
                    self.f.flush()
                    stall()
                return out
            def __getattr__(self, name):
                return getattr(self.f, name)
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return self.f.__exit__(*exc)

        os.fdopen = lambda fd, mode: Slow(real_fdopen(fd, mode))
    else:  # every byte written, not yet synced nor renamed
        os.fsync = lambda fd: stall()
    checkpoint.save_state({path!r}, {{"w": np.full((4, 1 << 20), 2.0, np.float32)}})  # 16 MiB
""")


@pytest.mark.parametrize("stage", ["payload", "fsync"])
def test_killed_mid_write_leaves_the_old_file(tmp_path, stage):
    path = tmp_path / "state.ckpt"
    old = {"w": np.ones((4, 1 << 20), np.float32)}
    save_state(path, old)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER.format(repo=REPO, path=str(path), stage=stage)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "WRITING"
        tmp = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
        size = os.path.getsize(tmp_path / tmp[0])
        assert len(tmp) == 1
        assert (size < 16 << 20) if stage == "payload" else (size > 16 << 20)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    loaded = load_state(path, like=old)
    np.testing.assert_array_equal(loaded["w"], old["w"])
    # the stray temporary file does not stop the next save
    new = {"w": np.full((4, 1 << 20), 3.0, np.float32)}
    save_state(path, new)
    np.testing.assert_array_equal(load_state(path, like=new)["w"], new["w"])
