"""The package installs and runs on its own: a wheel holds everything `rstf optimize` reads
(the templates, the op runtime, the TF client's source), and the `rstf` it holds optimizes
a model from outside the checkout."""
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(out), REPO], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (whl,) = [out / f for f in os.listdir(out) if f.endswith(".whl")]
    return whl


def test_wheel_holds_the_runtime_and_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("rstf/runtime/rstf_kernel.h", "rstf/runtime/rstf_team.c", "rstf/serving/tf_client.c",
              "rstf/templates/wrapper.cc.j2", "rstf/templates/subgraph.c.j2",
              "rstf/templates/ops/conv2d.c.j2"):
        assert f in names, f


@pytest.mark.tfbuild
def test_wheel_installed_in_a_fresh_venv_optimizes_and_runs(wheel, tmp_path):
    """The wheel installed into a new virtual environment (its dependencies from the system's
    site-packages: no index is reached): its `rstf` command optimizes a model outside the
    checkout, and the optimized model runs and matches TensorFlow."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    py, rstf = venv / "bin" / "python", venv / "bin" / "rstf"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = ("import numpy as np, tensorflow as tf\n"
            "g = tf.Graph()\n"
            "with g.as_default():\n"
            "    x = tf.compat.v1.placeholder(tf.float32, [2, 4], name='x')\n"
            "    tf.nn.relu(tf.matmul(x, np.ones((4, 3), np.float32)), name='y')\n"
            "open('m.pb', 'wb').write(g.as_graph_def().SerializeToString())\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(py), "-c", code], cwd=tmp_path, env=env, check=True,
                   capture_output=True)
    r = subprocess.run([str(py), "-c", "import rstf; print(rstf.__file__)"], cwd=tmp_path,
                       env=env, capture_output=True, text=True)
    assert r.stdout.startswith(str(venv)), r.stdout + r.stderr  # the wheel's, not the checkout's
    r = subprocess.run([str(rstf), "optimize", "m.pb", "-o", "m.rstf", "-q"], cwd=tmp_path,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.rstf" / "src" / "rstf_kernel.h").exists()
    r = subprocess.run([str(rstf), "compare", "m.pb", "m.rstf", "--reps", "1"], cwd=tmp_path,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stderr + r.stdout
