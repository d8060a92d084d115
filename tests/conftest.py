"""Test setup: 4 fake CPU devices (set before JAX starts), and strict dtype promotion off-by-default
checks kept to the tests that ask for them."""
import os
import shutil
import tempfile

# One LLVM module per program instead of XLA:CPU's split for parallel codegen: the suite's programs
# are small, both workers already keep both cores busy, and the split's threads cost more than they
# save (two of test_properties' properties: 28.5-29.1 s against 31.3-32.3 s; the README command:
# 8:38 against 8:57). The code generated is the same: the parity tier and every bit-for-bit test
# pass with it.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_cpu_parallel_codegen_split_count=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One JAX compilation cache for the run, shared by the xdist workers (they inherit the
# controller's environment) and the subprocesses tests start: most tests of an optimizer
# compile the same small programs, once per worker without it. Made before JAX is imported,
# removed when the run ends; a cache dir already set (a developer's own) is left alone.
_OWN_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="gradxform-tests-jaxcache-")
    os.environ.update(JAX_COMPILATION_CACHE_DIR=_OWN_CACHE,
                      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",  # every program: most are tiny
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (long fuzzing)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long test, run only with --slow")
    for tier, what in TIER_DOC.items():
        config.addinivalue_line("markers", f"{tier}: {what}")


# Each test file's tier, so `pytest -m unit` is the inner loop (README, "Development"). A file not
# named here is a unit file: a new test file is in the fast tier until it is put elsewhere.
TIER_DOC = {
    "unit": "fast tests of one piece, schedule, reader or message (the inner loop: pytest -m unit)",
    "table": "the shared optimizer table: every registered optimizer through common properties",
    "parity": "goldens recorded with MXNet, MindSpore and Paddle, and NumPy transcriptions of their kernels",
    "e2e": "examples, README blocks, ported scripts, the Trainer across devices and processes",
}
TIERS = {
    "table": ("test_properties", "test_hyper", "test_fused", "test_optax_tools", "test_held_rate",
              "test_state_domains", "test_registry", "test_hypothesis", "test_sharding", "test_round4",
              "test_moment_piece_bounds", "test_segments", "test_masking", "test_guards", "test_packed",
              "test_state_fixtures", "test_group_hyper"),
    "parity": ("test_mxnet_parity", "test_mindspore_parity", "test_paddle_parity", "test_paddle_optimizers_parity",
               "test_paddle_optimizers", "test_mxnet_reference", "test_gluon_select_golden",
               "test_schedule_goldens_extra", "test_mindspore_new_optimizers", "test_mxnet_new_optimizers",
               "test_trust_ratio_zero", "test_paddle_rmsprop_groups", "test_migrate_gluon", "test_migrate_mindspore",
               "test_migrate_paddle", "test_migrate_params", "test_migrate_ndarray", "test_thor",
               "test_migrate_hostile", "test_neutral", "test_paddle_loss_scaling", "test_loss_scale_resume",
               "test_mxnet_amp_loss_scale", "test_mindspore_adam_kernel", "test_kernel_order_ms_paddle",
               "test_mxnet_kernel_order"),
    "e2e": ("test_examples", "test_docs", "test_trainer_multiprocess", "test_ports_round5", "test_porting",
            "test_trainer_gluon", "test_trainer", "test_trainer_zero", "test_trainer_resume", "test_paddle_face",
            "test_api_docs", "test_typing", "test_trainer_model_state", "test_optimizer_objects",
            "test_checkpoint_scale"),
}
_TIER_OF = {name: tier for tier, names in TIERS.items() for name in names}

# Files whose single tests are long (a subprocess, a pair of processes, a long Trainer run: 10-30 s
# each in a full run), longest first: they run at the start, so that neither worker ends the run on
# one of them while the other idles (worksteal balances short tests, not a 26 s one queued last).
# Order only: every test still runs, each file's tests stay together (module fixtures are built once).
RUN_FIRST = ("test_typing", "test_trainer_multiprocess", "test_examples", "test_migrate_hostile",
             "test_trainer_zero", "test_group_values", "test_thor", "test_trainer", "test_api_docs")
_FIRST_RANK = {name: i for i, name in enumerate(RUN_FIRST)}


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _TIER_OF.get(item.path.stem, "unit")))
    items.sort(key=lambda item: _FIRST_RANK.get(item.path.stem, len(RUN_FIRST)))  # stable: the rest keep their order
    if not config.getoption("--slow"):
        skip = pytest.mark.skip(reason="slow: run with --slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
