"""A plain transformation fed ordinary trees against the flat kernel and optax,
timed in interleaved rounds (issue 14 item 7).

    python benchmarks/bench_plain.py [--sets resnet50,gpt2,tiny2000] [--rounds 7] [--steps 3]

Every contender is compiled first (compile seconds printed), then the rounds
alternate between them: each round times ``--steps`` donated calls of every
contender in turn, and a contender's figure is the median over all its calls.
On a 2-core machine shared with other jobs the load moves between seconds, so
interleaving is what makes the ratios to the flat kernel comparable; the
absolute milliseconds are not.

Contenders (one AdamW-like step each; lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 1e-2):
``flat`` the hand-written kernel over one flat p, g, m, v (the floor);
``flat_coupled`` the same with MXNet Adam's coupled decay (the floor of ``plain``'s rule);
``optax`` ``optax.adamw`` per leaf; ``optax.adam`` (no decay) and ``optax.adam+l2``
(``add_decayed_weights`` before it: MXNet Adam's coupled rule in optax);
``plain_wd0`` ``gradxform.create('adam')`` with its defaults (wd 0, a runtime
hyperparameter); ``plain`` ``gradxform.create('adam', wd=...)``
per leaf (MXNet Adam: rescale, coupled weight decay, bias-corrected lr), what
a Flax or Equinox user holds; ``packed`` the same through
``gradxform.fused.packed`` (small leaves packed inside the step);
``paddle.adamw`` and ``mindspore.adam_weight_decay`` plain ``create`` of the
two AdamW rules (decoupled decay: the bytes of ``flat``);
``tree_floor`` ``p - lr * g`` per leaf with no state (the least a step whose
parameters come and go as an ordinary tree costs). ``--contenders`` picks.
On the 2,000-leaf set ``plain`` and ``packed`` compile for minutes on 2 cores
(see ``bench_scale.py``); they are left out there unless named.
"""
from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import gradxform  # noqa: E402
from bench_step import (B1, B2, EPS, LR, SETS, WD, calls_per_sample, flat_kernel, make_tree, memory_of,  # noqa: E402
                        tx_step)  # noqa: E402


def flat_coupled_kernel(p, g, s):
    """MXNet Adam's rule on one flat buffer: the decay is added to the gradient
    (``g + wd * p``) before both moments, so XLA:CPU's m and v loops each read
    p as well (48 bytes/param in three loops against AdamW's 40)."""
    m, v, t = s
    t = t + 1
    tf = t.astype(jnp.float32)
    g = g + WD * p
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    step_size = LR * jnp.sqrt(1 - B2 ** tf) / (1 - B1 ** tf)
    return p - step_size * m / (jnp.sqrt(v) + EPS), (m, v, t)


def kernels_of(compiled) -> int:
    """Launches in the compiled step: the fusions, copies and library calls of its
    entry computation (what an accelerator runs one kernel each for, unless XLA
    batches them into a command buffer)."""
    text = compiled.as_text()
    entry = text[text.index("ENTRY"):]
    return len(re.findall(r"= [^=]*? (?:fusion|copy|custom-call|all-reduce|dynamic-update-slice)\(", entry))


def contenders(names, params):
    out = {}
    for name in names:
        if name in ("flat", "flat_coupled"):
            fp = jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(params)])
            out[name] = (flat_kernel if name == "flat" else flat_coupled_kernel,
                         lambda fp=fp: (fp, (jnp.zeros_like(fp), jnp.zeros_like(fp), jnp.zeros((), jnp.int32))),
                         "flat")
        elif name in ("optax", "optax.adam", "optax.adam+l2"):
            tx = {"optax": lambda: optax.adamw(LR, B1, B2, EPS, weight_decay=WD),
                  "optax.adam": lambda: optax.adam(LR, B1, B2, EPS),
                  "optax.adam+l2": lambda: optax.chain(optax.add_decayed_weights(WD), optax.adam(LR, B1, B2, EPS))}[name]()
            out[name] = (tx_step(tx, optax.apply_updates),
                         lambda tx=tx: (params, jax.tree.map(jnp.copy, tx.init(params))), "tree")
        elif name in ("plain", "packed", "plain_wd0"):
            wd = {"wd": WD} if name != "plain_wd0" else {}  # plain_wd0: the defaults (wd 0, a runtime hyperparameter)
            tx = gradxform.create("adam", learning_rate=LR, beta1=B1, beta2=B2, epsilon=EPS, **wd)
            if name == "packed":
                tx = gradxform.fused.packed(tx)
            out[name] = (tx_step(tx, gradxform.apply_updates),
                         lambda tx=tx: (params, jax.jit(tx.init)(params)), "tree")
        elif name in ("paddle.adamw", "mindspore.adam_weight_decay"):  # decoupled decay: AdamW's bytes
            eps = "epsilon" if name.startswith("paddle") else "eps"
            tx = gradxform.create(name, learning_rate=LR, beta1=B1, beta2=B2, weight_decay=WD, **{eps: EPS})
            out[name] = (tx_step(tx, gradxform.apply_updates),
                         lambda tx=tx: (params, jax.jit(tx.init)(params)), "tree")
        elif name == "tree_floor":
            out[name] = (lambda p, g, s: (jax.tree.map(lambda a, b: a - LR * b, p, g), s),
                         lambda: (params, ()), "tree")
        else:
            raise SystemExit(f"unknown contender {name!r}")
    return out


def run_set(set_name, names, rounds, steps):
    shapes = SETS[set_name]()
    n = sum(int(jnp.size(jnp.zeros(s, jnp.int8))) for s in shapes.values())
    print(f"\n== {set_name}: {len(shapes)} leaves, {n / 1e6:.2f} M params, load {os.getloadavg()[0]:.1f}",
          flush=True)
    params = make_tree(shapes, 0, 0.05)
    grads = make_tree(shapes, 1, 1e-3)
    flat_g = jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(grads)])
    live = {}
    for name, (step, make, kind) in contenders(names, params).items():
        p, s = make()
        p = jax.tree.map(jnp.copy, p)
        g = flat_g if kind == "flat" else grads
        t0 = time.perf_counter()
        compiled = jax.jit(step, donate_argnums=(0, 2)).lower(p, g, s).compile()
        compile_s = time.perf_counter() - t0
        p, s = compiled(p, g, s)
        jax.block_until_ready((p, s))
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        live[name] = [compiled, p, g, s, [], compile_s, memory_of(compiled), float(cost.get("bytes accessed", 0)) / n,
                      kernels_of(compiled), len(jax.tree.leaves(s))]
        gc.collect()
    chain = calls_per_sample()
    for _ in range(rounds):
        for name, entry in live.items():
            compiled, p, g, s, times = entry[:5]
            for _ in range(steps):
                t0 = time.perf_counter()
                for _ in range(chain):
                    p, s = compiled(p, g, s)
                jax.block_until_ready((p, s))
                times.append((time.perf_counter() - t0) / chain)
            entry[1], entry[3] = p, s
    floor = statistics.median(live["flat"][4]) if "flat" in live else None
    print(f"   {'contender':12s} {'median ms':>10s} {'/flat':>7s} {'compile s':>9s} {'XLA peak MB':>11s} {'B/param':>7s} "
          f"{'kernels':>7s} {'state leaves':>12s}  (load {os.getloadavg()[0]:.1f})")
    for name, (_, _, _, _, times, compile_s, mem, per_param, kernels, state_leaves) in live.items():
        med = statistics.median(times)
        ratio = f"{med / floor:6.2f}x" if floor else "   -   "
        mem_s = f"{mem / 2**20:11.1f}" if mem else f"{'?':>11s}"
        print(f"   {name:12s} {med * 1e3:10.3f} {ratio} {compile_s:9.2f} {mem_s} {per_param:7.1f} {kernels:7d} "
              f"{state_leaves:12d}", flush=True)
    live.clear()
    gc.collect()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="resnet50,gpt2,tiny2000")
    ap.add_argument("--contenders", default=None,
                    help="comma list of flat,flat_coupled,optax,optax.adam,optax.adam+l2,plain,plain_wd0,packed,"
                         "tree_floor,paddle.adamw,"
                         "mindspore.adam_weight_decay (default: all; "
                         "on tiny2000 all but plain and packed)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="timed calls per contender per round")
    args = ap.parse_args(argv)
    print(f"jax {jax.__version__}, optax {optax.__version__}, {jax.default_backend()}, "
          f"{os.cpu_count()} CPU cores, {args.rounds} rounds x {args.steps} calls", flush=True)
    for set_name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        if set_name not in SETS:
            ap.error(f"--sets: unknown set {set_name!r}; known: {', '.join(SETS)}")
        if args.contenders:
            names = [c.strip() for c in args.contenders.split(",") if c.strip()]
        elif set_name == "tiny2000":
            names = ["flat", "optax", "tree_floor"]
        else:
            names = ["flat", "flat_coupled", "optax", "plain", "paddle.adamw", "mindspore.adam_weight_decay",
                     "packed", "tree_floor"]
        run_set(set_name, names, args.rounds, args.steps)


if __name__ == "__main__":
    main()
