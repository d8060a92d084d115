"""What a guard against non-finite steps costs: XLA temporaries, bytes accessed
per parameter (XLA's cost analysis of the compiled, donated step: it does not
depend on the machine) and step time, beside optax.apply_if_finite.

    python benchmarks/bench_guard.py [--leaves 6] [--size 512] [--rounds 7]

Contenders, each a donated jitted step ``params, state <- step(params, state, grads)``:
``optax.adam``; ``optax.apply_if_finite(optax.adam)`` (checks the gradients
only); ``gx.adam`` (MXNet Adam, ``gradxform.create('adam')``); ``gx.adam+guard``
(``skip_nonfinite=True``: gradients, updates and the new state checked);
``gx.adam+guard(grads)`` (the guard checking the gradients only, as optax's);
``gx.adam+loss_scale`` (``dynamic_loss_scale``: gradients unscaled, then
checked as ``skip_nonfinite`` does) and ``gx.adam+loss_scale(grads)``.
Times are medians over interleaved rounds; on a shared 2-core machine only
the ratios within one run mean anything.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import gradxform


def contenders():
    return {
        "optax.adam": optax.adam(1e-3),
        "optax.apply_if_finite(adam)": optax.apply_if_finite(optax.adam(1e-3), 10),
        "gx.adam": gradxform.create("adam", learning_rate=1e-3),
        "gx.adam+guard": gradxform.create("adam", learning_rate=1e-3, skip_nonfinite=True),
        "gx.adam+guard(grads)": gradxform.pieces.skip_nonfinite(gradxform.create("adam", learning_rate=1e-3),
                                                                check_updates=False, check_state=False),
        "gx.adam+loss_scale": gradxform.pieces.dynamic_loss_scale(gradxform.create("adam", learning_rate=1e-3)),
        "gx.adam+loss_scale(grads)": gradxform.pieces.dynamic_loss_scale(
            gradxform.create("adam", learning_rate=1e-3), check_updates=False, check_state=False),
    }


def build(tx, params, grads):
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    state = jax.tree.map(jnp.copy, tx.init(params))  # distinct buffers (optax shares its zero counts)
    fn = jax.jit(step, donate_argnums=(0, 1))
    compiled = fn.lower(params, state, grads).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return fn, state, compiled.memory_analysis().temp_size_in_bytes, float(cost.get("bytes accessed", 0.0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=6)
    ap.add_argument("--size", type=int, default=512, help="each leaf is size x size float32")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    make = lambda: {f"w{i}": jnp.full((args.size, args.size), 0.5, jnp.float32) for i in range(args.leaves)}  # noqa: E731
    grads = {k: v * 0.01 for k, v in make().items()}
    n = args.leaves * args.size * args.size
    runs = {}
    for name, tx in contenders().items():
        params = make()
        fn, state, temp, accessed = build(tx, params, grads)
        runs[name] = dict(fn=fn, params=params, state=state, temp=temp, accessed=accessed, times=[])
    chain = 1 if jax.default_backend() == "cpu" else 10  # as bench_step.calls_per_sample
    for _ in range(args.rounds):
        for r in runs.values():
            for _ in range(args.steps):
                t = time.perf_counter()
                for _ in range(chain):
                    r["params"], r["state"] = r["fn"](r["params"], r["state"], grads)
                jax.block_until_ready((r["params"], r["state"]))
                r["times"].append((time.perf_counter() - t) / chain)
    base = statistics.median(runs["optax.apply_if_finite(adam)"]["times"])
    print(f"{n / 2**20:.1f} M float32 parameters ({4 * n / 2**20:.0f} MiB), {args.leaves} leaves")
    print(f"{'':30s} {'temps MiB':>10s} {'B/param':>8s} {'ms':>8s} {'vs apply_if_finite':>19s}")
    for name, r in runs.items():
        med = statistics.median(r["times"])
        print(f"{name:30s} {r['temp'] / 2**20:10.2f} {r['accessed'] / n:8.1f} {1e3 * med:8.2f} {med / base:18.2f}x")


if __name__ == "__main__":
    main()
