"""Where a framework rounds and XLA would not: the one helper that keeps a product
rounded on its own before the addition that follows it.

XLA:CPU (and XLA:GPU through LLVM/NVPTX) contracts ``a * b + c`` inside a jitted program
into a fused multiply-add, rounded once. The frameworks' fused kernels are contracted the
same way by their compilers (GCC's ``-ffp-contract=fast``, nvcc's ``--fmad=true``), so a
rule written in a kernel's order of operations reproduces it to the last bit. A product
that a framework computes as an operator of its own (MindSpore's ``op_mul`` before
``op_add`` in ``_apply_decay``) is rounded before it is added: `rounded` says so.
Measured in tests/test_mindspore_adam_kernel.py (weight decay): without it 5-12 of 4,096
weights differ from MindSpore in their last bit per step.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["rounded"]


def rounded(x):
    """``x``, rounded to its dtype before any later addition reads it (no FMA).

    A select on the value is what stops the contraction (an optimization
    barrier does not: XLA:CPU still fuses across it); NaN stays NaN."""
    # lax's select and compare, not jnp.where: each parameter leaf has several of these, and
    # jnp.where's nested jit costs lowering time (1,000 leaves of MXNet Adam, medians of 3: first
    # call 10.1 s against 10.5 s, lowering 0.7 s against 1.1 s). full_like gives the NaN the
    # leaf's own sharding, traced or eager: select refuses operands sharded differently over
    # explicit mesh axes.
    x = jnp.asarray(x)
    return lax.select(lax.ne(x, x), lax.full_like(x, jnp.nan), x)
