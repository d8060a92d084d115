"""`jit`: ``jax.jit`` with XLA:CPU's quick compile, for tests whose claims hold whatever the compiler's
arithmetic.

Most of the suite's time is XLA compiling small, distinct programs (every optimizer through every
property). XLA:CPU's older emitters at optimization level 0 compile those programs 2.5-3.5x faster
(50 optimizers' 3-leaf steps: 7.3 s -> 2.1 s of compile), and give the same answer up to rounding:
without the default pipeline's fused multiply-adds, a product is rounded before the sum that follows.

So the rule, for every test file:
- `jit` here where the assertion is a tolerance, a dtype, a structure, a trace count or finiteness,
  or where both sides of an equality are compiled with it (a donated step against the same step);
- plain ``jax.jit`` (what users run) wherever bits are compared across different programs or with
  a framework's kernel or golden: those claims are about the default compiler, and some of them do
  not hold under this one (fused against per-leaf MindSpore Adam, the Trainer against a plain loop).
"""
from __future__ import annotations

import functools

import jax

# DebugOptions fields (XLA's flags), passed per program: the process's defaults stay the users'.
QUICK = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}

jit = functools.partial(jax.jit, compiler_options=QUICK)
