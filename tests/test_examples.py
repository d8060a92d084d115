"""The examples, the README's code and its optimizer table stay true.

Each example runs as a subprocess in its fast mode (as a user would run it,
from a scratch directory, with a time limit) and must exit 0 and print its
result line. An example is skipped only when its optional dependency is not
installed (the `test` extra installs them all). The README's and docs' ```python
blocks run each by itself in `tests/test_docs.py`. Together these take well under a minute.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

import gradxform

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 180  # per example; each takes 5-20 s on 2 cores


def needs(*modules: str) -> None:
    """Skip when an optional dependency is missing. Like `pytest.importorskip`,
    but without importing it into the test process (flax, sklearn and
    matplotlib together cost seconds here; the example imports them anyway)."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} is not installed (pip install -e '.[test]')")


def run(args: list[str], cwd: Path, *, devices: int | None = None) -> str:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)          # the examples set what they need, as for a user
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["MPLBACKEND"] = "Agg"
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{out[-4000:]}"
    return out


def example(name: str) -> str:
    return str(ROOT / "examples" / name)


def test_train_digits_fast(tmp_path):
    needs("sklearn", "tqdm", "matplotlib")
    png = tmp_path / "curves.png"
    # --devices 2 also exercises the data-parallel path (and the XLA flag the script sets).
    out = run([example("train_digits.py"), "--fast", "--devices", "2", "--out", str(png)], tmp_path)
    for label in ("sgd", "adam", "rmsprop", "mindspore.momentum"):
        assert re.search(rf"{re.escape(label)}: \d+\.\d+%", out), out[-2000:]
    acc = float(re.search(r"test accuracy \(adam\): ([\d.]+)%", out).group(1))
    assert acc > 50.0, f"one epoch should already be far above chance (10%); got {acc}%"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gluon_port_fast(tmp_path):
    out = run([example("gluon_port.py"), "--fast"], tmp_path)
    assert "resumed step is bit-identical: True" in out
    assert "learning rate now 0.01" in out


def test_flax_example_fast(tmp_path):
    needs("flax")
    out = run([example("flax_example.py"), "--fast"], tmp_path)
    assert "train_step traced 1x" in out and "nnx: final mse" in out


def test_equinox_example_fast(tmp_path):
    needs("equinox")
    out = run([example("equinox_example.py"), "--fast"], tmp_path)
    assert "step traced 1x" in out


def test_multi_device_fast(tmp_path):
    out = run([example("multi_device.py"), "--fast"], tmp_path)
    assert "trainer.num_devices=4" in out
    diff = float(re.search(r"params\(1 device\)\| = ([\d.e+-]+)", out).group(1))
    assert diff < 1e-3, "4 devices and 1 device must agree to float32 rounding"


def test_readme_first_commands_are_the_run_commands():
    """The README opens with the two commands; they must name files that exist."""
    head = (ROOT / "README.md").read_text().split("\n", 8)[:8]
    assert any("python -m pip install -e '.[examples]' && python examples/train_digits.py" in line
               for line in head)
    assert any("python -m pip install -e '.[test]' && python -m pytest -q" in line for line in head)
    assert (ROOT / "examples" / "train_digits.py").is_file()


def test_readme_optimizer_table_is_current():
    spec = importlib.util.spec_from_file_location("gen_optimizer_table", ROOT / "tools" / "gen_optimizer_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--check"]) == 0, "run: python tools/gen_optimizer_table.py --write"


def _train_digits_module():
    spec = importlib.util.spec_from_file_location("train_digits", example("train_digits.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_digits_builds_every_registered_optimizer():
    # `--optimizer NAME` for every name: the example supplies what a factory requires
    # (a learning rate where there is no default), or says where to go instead (THOR)
    digits = _train_digits_module()
    params = digits.init_mlp(jax.random.PRNGKey(0))
    for name in gradxform.registered_names():
        if name in digits.SEPARATE:
            with pytest.raises(SystemExit, match="thor_digits.py"):
                digits.required_kwargs(name)
            continue
        tx = gradxform.create(name, **digits.required_kwargs(name))
        tx.init(params)


@pytest.mark.parametrize("name", ["paddle.rmsprop"])  # every name is built by the test above
def test_train_digits_runs_an_optimizer_without_a_default_lr(tmp_path, name):
    out = run([example("train_digits.py"), "--fast", "--only", "--optimizer", name, "--out", ""], tmp_path)
    assert f"test accuracy ({name})" in out
