"""A whole training step (forward, backward, all-reduce, Adam update) through
`gradxform.Trainer.compile_step`, fused layout against per-leaf layout, side by
side with a hand-written optax step and with the forward+backward alone.

    python benchmarks/bench_train_step.py                # both models, 20 rounds
    python benchmarks/bench_train_step.py --models deep --rounds 10
    python benchmarks/bench_train_step.py --fake-cpu-devices 4   # the Trainer over 4 CPU devices

It answers what the step benchmark (bench_step.py) cannot: when the Trainer
owns flat parameters and hands the loss ``params.unravel()``, does the
backward pass write its gradients into the flat gradient buffers for free,
or does the fused layout pay a copy (XLA concatenating the per-leaf
cotangents)? The optimizer's share of a step is ``step - fwd+bwd``.

Contenders (params and state donated in every jitted step; the Trainer runs
on ``--devices`` devices, default 1, each device getting batch / devices):
  fwd+bwd          jit(value_and_grad(loss)) alone: the floor of a step
  optax            jit of value_and_grad + optax.chain(add_decayed_weights, adam) + apply
  Trainer fused    Trainer(..., fused=True).compile_step(loss)
  Trainer leaves   Trainer(..., fused=False).compile_step(loss)
Timing: ``--rounds`` rounds; in each round every contender runs ``--calls``
steps back to back (each waits for its result) and its median is kept; the
printed time is the median over rounds, so the contenders share the machine's
noise. XLA's memory accounting of each compiled step is printed too.
Benchmarks are not tests: nothing here asserts.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if "--fake-cpu-devices" in sys.argv:  # must be set before JAX starts
    _n = sys.argv[sys.argv.index("--fake-cpu-devices") + 1]
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={_n}"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import gradxform  # noqa: E402

LR, WD = 1e-3, 1e-4
DEVICES = [1]  # set by --devices

# name: (layers, width, batch): "wide" is few large leaves (optimizer traffic
# dominates at a small batch), "deep" is many small leaves (launch overhead)
MODELS = {"wide": (8, 1024, 32), "deep": (200, 64, 32)}


def mlp_params(layers: int, width: int, seed: int = 0) -> dict:
    keys = jax.random.split(jax.random.key(seed), layers)
    return {f"layer{i:03d}": {"kernel": jax.random.normal(k, (width, width)) / np.sqrt(width),
                              "bias": jnp.zeros((width,))} for i, k in enumerate(keys)}


def mlp_loss(params, batch):
    x, y = batch
    for name in sorted(params):
        x = jnp.tanh(x @ params[name]["kernel"] + params[name]["bias"])
    return jnp.sum((x - y) ** 2)


def batch_of(width: int, batch: int, seed: int = 1):
    rng = np.random.RandomState(seed)
    return rng.randn(batch, width).astype(np.float32), rng.randn(batch, width).astype(np.float32)


def xla_bytes(compiled) -> str:
    try:
        m = compiled.memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
        return f"{total / 2**20:.1f} MiB (temp {m.temp_size_in_bytes / 2**20:.1f})"
    except Exception as err:  # noqa: BLE001 - not every backend reports it
        return f"n/a ({type(err).__name__})"


def contenders(layers: int, width: int, batch_size: int):
    """name -> (run_once, memory string)."""
    batch = batch_of(width, batch_size)
    out = {}

    grad_fn = jax.jit(jax.value_and_grad(mlp_loss))
    params = mlp_params(layers, width)
    out["fwd+bwd"] = (lambda: jax.block_until_ready(grad_fn(params, batch)),
                      xla_bytes(grad_fn.lower(params, batch).compile()))

    tx = optax.chain(optax.add_decayed_weights(WD), optax.adam(LR))

    def optax_step(p, s, b):
        loss, g = jax.value_and_grad(mlp_loss)(p, b)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    optax_jit = jax.jit(optax_step, donate_argnums=(0, 1))
    box = {"p": mlp_params(layers, width)}
    box["s"] = tx.init(box["p"])
    mem = xla_bytes(optax_jit.lower(box["p"], box["s"], batch).compile())

    def run_optax():
        box["p"], box["s"], loss = optax_jit(box["p"], box["s"], batch)
        jax.block_until_ready(loss)

    out["optax"] = (run_optax, mem)

    for label, fused in (("Trainer fused", True), ("Trainer leaves", False)):
        trainer = gradxform.Trainer(mlp_params(layers, width), "adam", {"learning_rate": LR, "wd": WD},
                                    devices=jax.devices()[:DEVICES[0]], fused=fused)
        run = trainer.compile_step(mlp_loss)
        run(batch, batch_size)  # compiles
        program = trainer._programs[("compiled", mlp_loss, False, None)]  # private: XLA memory only
        rescale = np.float32(1.0 / batch_size)
        split = gradxform.trainer.split_batch(batch, DEVICES[0])
        mem = xla_bytes(program.lower(trainer._params, trainer._state, trainer._residual, split,
                                      rescale).compile())
        out[label] = ((lambda run=run: jax.block_until_ready(run(batch, batch_size))), mem)
    return out


def measure(model: str, rounds: int, calls: int) -> None:
    layers, width, batch = MODELS[model]
    n_params = layers * (width * width + width)
    print(f"\n## {model}: {layers} dense layers of {width} ({2 * layers} leaves, {n_params / 1e6:.2f} M "
          f"params), batch {batch}, Trainer on {DEVICES[0]} {jax.devices()[0].platform} device(s)")
    t0 = time.perf_counter()
    runs = contenders(layers, width, batch)
    print(f"(built and compiled in {time.perf_counter() - t0:.1f} s)")
    for fn, _ in runs.values():
        fn()  # warm-up
    samples = {k: [] for k in runs}
    for _ in range(rounds):
        for name, (fn, _) in runs.items():
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            samples[name].append(statistics.median(times))
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    floor = med["fwd+bwd"]
    print("| contender | step ms | x fwd+bwd | optimizer share ms | XLA memory |")
    print("|---|---|---|---|---|")
    for name, (_, mem) in runs.items():
        share = "" if name == "fwd+bwd" else f"{med[name] - floor:.3f}"
        print(f"| {name} | {med[name]:.3f} | {med[name] / floor:.2f}x | {share} | {mem} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--devices", type=int, default=None,
                        help="devices the Trainer uses (default: 1, or all fake CPU devices)")
    parser.add_argument("--fake-cpu-devices", type=int, default=None,
                        help="XLA_FLAGS=--xla_force_host_platform_device_count=N (CPU only)")
    args = parser.parse_args(argv)
    DEVICES[0] = args.devices or (args.fake_cpu_devices or 1)
    print(f"jax {jax.__version__}, optax {optax.__version__}, devices {jax.devices()}")
    for model in args.models.split(","):
        measure(model, args.rounds, args.calls)


if __name__ == "__main__":
    main()
