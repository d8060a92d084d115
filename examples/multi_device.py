"""The gradxform Trainer on 4 devices: data parallel, with the same result as 1 device.

On a machine without accelerators, XLA can pretend the CPU is 4 devices; the
flag must be set before JAX starts, hence the first lines of this file. With
real GPUs/TPUs leave the flag out: the Trainer uses ``jax.local_devices()``.

The parameters and the optimizer state are replicated on every device; each
device gets a quarter of the batch, the gradients are summed over the devices
(``allreduce_grads``), and every device applies the same update. The script
trains the same model on 1 device and on 4 and checks that the parameters
agree to float32 rounding.

Multi-host: run this same script on every host, with one line added before
anything else touches JAX (each process passes its own share of the batch;
``batch_size`` stays the global one; the sums then run over every host's
devices)::

    jax.distributed.initialize(coordinator_address="10.0.0.1:1234", num_processes=2, process_id=i)

    python examples/multi_device.py          # 200 steps
    python examples/multi_device.py --fast   # 20 steps (what the tests run)
"""
import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gradxform  # noqa: E402


def loss_fn(params, batch):
    """Least squares, summed over the examples of this device's shard."""
    x, y = batch
    pred = jnp.tanh(x @ params["hidden"]["weight"]) @ params["out"]["weight"]
    return jnp.sum((pred - y) ** 2)


def train(devices, steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"hidden": {"weight": jnp.asarray(rng.normal(0, 0.3, (16, 32)), jnp.float32)},
              "out": {"weight": jnp.asarray(rng.normal(0, 0.3, (32, 1)), jnp.float32)}}
    x = rng.normal(size=(steps, 64, 16)).astype(np.float32)
    y = np.sin(x.sum(-1, keepdims=True) / 4).astype(np.float32)
    trainer = gradxform.Trainer(params, "adam", {"learning_rate": 1e-2}, devices=devices)
    step = trainer.compile_step(loss_fn)        # forward, backward, psum over devices, update
    for i in range(steps):
        loss = step((x[i], y[i]), 64)           # 64 = the global batch: 16 examples per device
    return trainer, float(loss) / 64


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fast", action="store_true", help="20 steps")
    args = ap.parse_args(argv)
    steps = 20 if args.fast else args.steps
    devices = jax.local_devices()
    print(f"{len(devices)} local devices: {devices}  (process {jax.process_index()} of {jax.process_count()})")
    assert len(devices) >= 4, "set XLA_FLAGS before JAX starts (see the top of this file)"

    four, loss4 = train(devices[:4], steps)
    one, loss1 = train(devices[:1], steps)
    print(f"4 devices: trainer.num_devices={four.num_devices}, final loss {loss4:.5f}")
    print(f"1 device:  trainer.num_devices={one.num_devices}, final loss {loss1:.5f}")

    # What step() does, by hand: per-device gradients (leading axis = devices), then the sum.
    batch = (np.ones((64, 16), np.float32), np.zeros((64, 1), np.float32))
    grads = four.grads(loss_fn, batch)
    print("per-device gradient shape:", grads["hidden"]["weight"].shape)       # (4, 16, 32)
    summed = four.allreduce_grads(grads)
    assert np.allclose(summed["hidden"]["weight"][0], np.sum(grads["hidden"]["weight"], 0), rtol=1e-5)

    # Same data, same updates: the results differ only by the order of float32 sums.
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
               zip(jax.tree.leaves(four.params), jax.tree.leaves(one.params)))
    print(f"max |params(4 devices) - params(1 device)| = {diff:.2e}")
    assert diff < 1e-3, diff


if __name__ == "__main__":
    main()
