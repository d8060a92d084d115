#!/usr/bin/env bash
# The GPU benchmarks in one run (issue 25 item 7): every script beside optax
# (and PyTorch's fused AdamW where it imports), each under its own time limit
# so that one slow compile cannot cost the others. Logs go to $OUT (or
# ./gpu_logs). Run from the repository root on a machine with jax[cuda],
# optax and chex installed; gradxform is taken from the checkout.
#
#     bash benchmarks/run_gpu.sh            # about 7 minutes on one H100 (optax compiles the 2,000-leaf step for 81 s)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-gpu_logs}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# JAX takes 75% of the GPU by default; PyTorch runs in the same process here.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.5}
py=${PYTHON:-python3}

run() {  # run NAME SECONDS ARGS...: one benchmark, its log in $out/NAME.txt
    local name=$1 limit=$2
    shift 2
    echo "== $name ($*), limit ${limit}s, $(date +%T)"
    timeout "$limit" "$py" "$@" > "$out/$name.txt" 2>&1
    echo "   rc $? at $(date +%T)"
    cat "$out/$name.txt"
}

{
    nvidia-smi -L 2>/dev/null
    "$py" -c "import jax, optax, chex; print('jax', jax.__version__, 'optax', optax.__version__, jax.devices())"
    "$py" -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())" 2>&1 | tail -1
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

run step_large 170 benchmarks/bench_step.py --sets resnet50,gpt2 --steps 20
run plain 130 benchmarks/bench_plain.py --sets resnet50,gpt2 --rounds 5 --steps 3 \
    --contenders flat,flat_coupled,optax,optax.adam,optax.adam+l2,plain_wd0,plain,packed,paddle.adamw,mindspore.adam_weight_decay,tree_floor
run guard 60 benchmarks/bench_guard.py --leaves 24 --size 2048 --rounds 5
run step_tiny 200 benchmarks/bench_step.py --sets tiny2000 --steps 20
run train_step 60 benchmarks/bench_train_step.py --rounds 5
run bytes 150 benchmarks/bench_bytes.py
