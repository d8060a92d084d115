"""What reading a scheduler object inside the update costs (gradxform/schedules/_held.py).

A Paddle optimizer built with a ``gradxform.paddle.lr`` scheduler reads ``sched()`` in every update
through a host callback, and the scheduler waits for updates in flight before it changes. This
times a jitted, donated step of ``paddle.momentum`` three ways, side by side in one process:

* ``float``: ``learning_rate=0.1`` (the rate is a hyperparameter in the state);
* ``held``: ``learning_rate=StepDecay(...)``, the loop stepping the scheduler after each update, as
  a Paddle script does (the callback, and the wait in ``sched.step()``);
* ``set_hyper``: the float optimizer with ``set_learning_rate(state, sched())`` before each update
  (what a loop had to write before the held read).

    PYTHONPATH=$PWD/src python benchmarks/bench_held_rate.py [--leaves 16] [--size 65536] [--steps 200]

Prints the median step time of each and the ratios to ``float`` (medians of 5 rounds; the
machines are shared, so compare ratios, not absolute times).
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

import gradxform
from gradxform.paddle import lr as LR


def _loop(kind: str, params, grads, steps: int) -> float:
    sched = LR.StepDecay(0.1, step_size=10, gamma=0.9)
    tx = gradxform.paddle.Momentum(sched if kind == "held" else 0.1, momentum=0.9)
    state = tx.init(params)

    @jax.jit
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return gradxform.apply_updates(p, u), s

    step = jax.jit(step, donate_argnums=(0, 1))
    p, s = jax.tree.map(jnp.copy, params), state
    p, s = step(p, s, grads)  # compile
    jax.block_until_ready(p)
    start = time.perf_counter()
    for _ in range(steps):
        if kind == "set_hyper":
            s = gradxform.set_learning_rate(s, sched())
        p, s = step(p, s, grads)
        if kind != "float":
            sched.step()
    jax.block_until_ready((p, s))
    return (time.perf_counter() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--size", type=int, default=1 << 16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    params = {f"w{i}": jnp.ones((args.size,), jnp.float32) for i in range(args.leaves)}
    grads = jax.tree.map(lambda x: x * 1e-3, params)
    times = {k: [] for k in ("float", "held", "set_hyper")}
    for _ in range(args.rounds):  # interleaved, so drift on a shared machine hits all three alike
        for kind in times:
            times[kind].append(_loop(kind, params, grads, args.steps))
    base = statistics.median(times["float"])
    print(f"paddle.momentum, {args.leaves} leaves x {args.size} float32, {jax.devices()[0].platform}, "
          f"median of {args.rounds} rounds of {args.steps} steps")
    for kind, ts in times.items():
        med = statistics.median(ts)
        print(f"  {kind:10s} {med * 1e6:9.1f} us/step   {med / base:5.2f}x float")


if __name__ == "__main__":
    main()
