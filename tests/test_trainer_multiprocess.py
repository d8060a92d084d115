"""Two processes on this machine's CPU, 2 devices each, reduce over all 4 devices.

Each process runs this file as a script (``worker``): `jax.distributed.initialize`
with a coordinator on 127.0.0.1, gloo CPU collectives (jax 0.10.2's default
for ``jax_cpu_collectives_implementation``; set explicitly anyway), then the
same Trainer code as one process would run, on its half of every global
batch. Both must end with the same parameters as one process training on the
whole batch on one device (float32 summation order only: rtol=1e-5,
atol=1e-6), and with bit-identical parameters to each other. The same holds
with the optimizer state sharded over the 4 devices of both processes
(``update_on_kvstore=True``): each device then holds a quarter of it.

One pair of processes serves both tests: each process runs the replicated Trainer, then the sharded
one (two Trainers, one `jax.distributed` session), and saves each one's result as soon as it is done;
each test reads its own files (a pair that fails in the replicated run fails both, saying so). One pair
instead of two saves two interpreter starts and a gloo set-up (~15 s of the suite's CPU time).
"""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TIMEOUT_S = 120
STEPS = ("step", "step", "clip", "compiled")


def _model():
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(1))
    params = {"dense": {"kernel": jax.random.normal(k1, (3, 4)) * 0.5, "bias": jnp.zeros(4)},
              "out": jax.random.normal(k2, (4,)) * 0.5}

    def loss_fn(p, batch):
        x, y = batch
        return jnp.sum((jnp.tanh(x @ p["dense"]["kernel"] + p["dense"]["bias"]) @ p["out"] - y) ** 2)

    rng = np.random.RandomState(3)
    batches = [(rng.randn(8, 3).astype(np.float32), rng.randn(8).astype(np.float32)) for _ in STEPS]
    return params, loss_fn, batches


def _train(trainer, loss_fn, batches):
    """The training loop both sides run; ``batches`` are this process's share."""
    import jax
    import optax

    def clip(g):
        norm = optax.tree.norm(g)
        return jax.tree.map(lambda x: x * jax.numpy.minimum(1.0, 0.5 / norm), g)

    run = trainer.compile_step(loss_fn)
    for how, batch in zip(STEPS, batches):
        if how == "step":
            trainer.step(trainer.grads(loss_fn, batch), 8)
        elif how == "clip":
            trainer.update(jax.vmap(clip)(trainer.allreduce_grads(trainer.grads(loss_fn, batch))), 8)
        else:
            run(batch, 8)
    return trainer.params


OPT = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})


MODES = {"replicated": False, "sharded_state": True}  # test id: update_on_kvstore


def worker(process_id: int, port: int, out_dir: str) -> None:
    """Both Trainers in turn, in one distributed session; ``out_dir/{mode}_p{id}.npz`` after each."""
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, REPO)
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=60)
    import gradxform
    from gradxform import Trainer

    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    for mode, sharded in MODES.items():
        print(f"worker {process_id}: {mode} run", flush=True)
        params, loss_fn, batches = _model()
        mine = [jax.tree.map(lambda x: x[4 * process_id: 4 * process_id + 4], b) for b in batches]
        trainer = Trainer(params, *OPT, compression_params=None, update_on_kvstore=sharded or None)
        if sharded:  # every state buffer: a (1, ceil(L / 4)) shard on each of this process's 2 devices
            for x in jax.tree.leaves(trainer._state.inner):
                if x.ndim == 2:
                    assert [s.data.shape[0] for s in x.addressable_shards] == [1, 1], x.shape
                    assert x.shape[0] == 4
        final = _train(trainer, loss_fn, mine)
        momentum = jax.tree.leaves(trainer.state)  # gathered from both processes' shards
        np.savez(os.path.join(out_dir, f"{mode}_p{process_id}.npz"),
                 **{name: np.asarray(v) for name, v in zip(gradxform.param_names(final), jax.tree.leaves(final))},
                 **{f"state{i}": np.asarray(v) for i, v in enumerate(momentum)})
    jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """Starts the two processes (both modes), runs the one-process reference meanwhile, waits."""
    import jax

    from gradxform import Trainer

    out_dir = tmp_path_factory.mktemp("two_processes")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["PYTHONPATH"] = os.path.join(REPO, "src") + os.pathsep + env.get("PYTHONPATH", "")
    procs = [subprocess.Popen([sys.executable, __file__, str(i), str(port), str(out_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    # the one-process reference runs while the workers start
    params, loss_fn, batches = _model()
    single = Trainer(params, *OPT, devices=jax.devices()[:1])
    want = _train(single, loss_fn, batches)
    try:
        logs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
        problem = "\n".join(log[-4000:] for p, log in zip(procs, logs) if p.returncode != 0)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        problem = f"the two processes did not finish in {TIMEOUT_S} s:\n" + "\n".join(
            p.communicate()[0][-3000:] for p in procs)
    return out_dir, params, single, want, problem


@pytest.mark.parametrize("mode", list(MODES))
def test_two_processes_equal_one_process_on_the_whole_batch(two_process_runs, mode):
    out_dir, params, single, want, problem = two_process_runs
    outs = [out_dir / f"{mode}_p{i}.npz" for i in range(2)]
    assert all(o.exists() for o in outs), f"{mode}: no result from both processes\n{problem}"
    assert not problem or mode == "replicated", f"{mode}: a process failed after this run\n{problem}"
    import jax

    got = [dict(np.load(o)) for o in outs]
    import gradxform

    assert sorted(k for k in got[0] if not k.startswith("state")) == sorted(gradxform.param_names(want))
    for name, ref in zip(gradxform.param_names(want), jax.tree.leaves(want)):
        np.testing.assert_array_equal(got[0][name], got[1][name], err_msg=f"{mode} {name}")  # same model on both
        np.testing.assert_allclose(got[0][name], np.asarray(ref), rtol=1e-5, atol=1e-6, err_msg=f"{mode} {name}")
    assert not np.allclose(got[0]["out"], np.asarray(params["out"])), mode  # it did train
    for i, ref in enumerate(jax.tree.leaves(single.state)):
        np.testing.assert_array_equal(got[0][f"state{i}"], got[1][f"state{i}"], err_msg=f"{mode} state{i}")
        np.testing.assert_allclose(got[0][f"state{i}"], np.asarray(ref), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{mode} state{i}")


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
