"""Why the per-leaf first call is above optax's: XLA compile time of one
hand-written Adam step over N leaves, the same arithmetic three ways:

* ``state``: its scalars (beta1, 1 - beta1, ..., the step size) are runtime
  values, as gradxform keeps hyperparameters in the state (no recompile on
  `gradxform.set_hyper`): each leaf's loop fusions take them as operands;
* ``vector``: the same scalars stacked into one runtime vector that each
  leaf's fusion slices (one operand instead of eight);
* ``constants``: beta1, beta2, epsilon, wd and rescale are Python floats
  folded into the program, as ``optax.adam`` does.

    python benchmarks/bench_operands.py --leaves 1000 --repeat 3

Each number is the median over ``--repeat`` of ``jax.jit(...).lower(...).compile()``
after ``jax.clear_caches()``, the three forms interleaved. Not a test:
nothing here asserts.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

SCALARS = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2, rescale=1.0)


def make_step(form: str):
    def step(params, grads, m, v, hyper, count):
        t = (count + 1).astype(jnp.float32)
        h = {k: jnp.float32(x) for k, x in SCALARS.items()} if form == "constants" else hyper
        b1, b2 = h["b1"], h["b2"]
        size = hyper["lr"] * jnp.sqrt(1 - hyper["b2"] ** t) / (1 - hyper["b1"] ** t)
        sc = dict(b1=b1, c1=1 - b1, b2=b2, c2=1 - b2, size=size, eps=h["eps"], wd=h["wd"], rs=h["rescale"])
        if form == "vector":
            keys = list(sc)
            packed = jnp.stack([sc[k] for k in keys])
            sc = {k: packed[i] for i, k in enumerate(keys)}
        out = []
        for p, g, mu, nu in zip(params, grads, m, v):
            g = g * sc["rs"] + sc["wd"] * p
            mu = sc["b1"] * mu + sc["c1"] * g
            nu = sc["b2"] * nu + sc["c2"] * g * g
            out.append((p - sc["size"] * mu / (jnp.sqrt(nu) + sc["eps"]), mu, nu))
        return out, count + 1
    return step


def compile_seconds(form: str, n: int) -> float:
    params = [jnp.full((16,), float(i % 7)) for i in range(n)]
    zeros = [jnp.zeros_like(p) for p in params]
    hyper = {k: jnp.float32(x) for k, x in SCALARS.items()}
    jax.clear_caches()
    t0 = time.perf_counter()
    jax.jit(make_step(form), donate_argnums=(0, 2, 3)).lower(params, params, zeros, zeros, hyper,
                                                           jnp.int32(0)).compile()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    forms = ("state", "vector", "constants")
    times: dict[str, list[float]] = {f: [] for f in forms}
    for _ in range(args.repeat):
        for f in forms:
            times[f].append(compile_seconds(f, args.leaves))
    base = statistics.median(times["constants"])
    print(f"{args.leaves} leaves of 16 float32, lower + compile, median of {args.repeat}:")
    for f in forms:
        med = statistics.median(times[f])
        print(f"  {f:10s} {med:7.2f} s   {med / base:5.2f}x constants")


if __name__ == "__main__":
    main()
