"""Serving: the SavedModel, the ModelServer ops package and the Python loader."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from harness import make_graph_def, run_tf, save_graph_def, tf
from rstf.pipeline import optimize

rng = np.random.RandomState(3)
W = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
V = rng.standard_normal((4, 3)).astype(np.float32)


def model_a():
    x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 2], name="image")
    y = tf.nn.relu(tf.nn.conv2d(x, W, 1, "SAME"))
    y = tf.nn.max_pool2d(y, 2, 2, "VALID")
    y = tf.reduce_mean(y, [1, 2])
    tf.nn.softmax(tf.matmul(y, V), name="probs")


def model_b():
    x = tf.compat.v1.placeholder(tf.float32, [2, 5], name="features")
    tf.nn.relu(tf.matmul(x, rng.standard_normal((5, 4)).astype(np.float32)) - 0.1,
               name="scores")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("serving")
    a = save_graph_def(make_graph_def(model_a), str(d), "a.pb")
    b = save_graph_def(make_graph_def(model_b), str(d), "b.pb")
    quiet = lambda m: None  # noqa: E731
    outs = {
        "a": optimize(a, str(d / "a.rstf"), log=quiet, model_name="model_a"),
        "a_small_parts": optimize(a, str(d / "a2.rstf"), max_ops=2, log=quiet),
        "b": optimize(b, str(d / "b.rstf"), log=quiet),
    }
    return d, a, b, outs


def fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.tfbuild
def test_saved_model_in_fresh_process(built):
    d, a, _, outs = built
    x = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    np.save(d / "x.npy", x)
    ref = run_tf(make_graph_def(model_a), {"image": x}, ["probs:0"])[0]
    sm = d / "a.rstf" / "serving" / "model_a" / "1"
    assert (sm / "saved_model.pb").exists()
    r = fresh_python(f"""
        import numpy as np, tensorflow as tf
        tf.load_op_library({str(d / "a.rstf" / outs["a"]["library"])!r})
        m = tf.saved_model.load({str(sm)!r})
        f = m.signatures["serving_default"]
        out = f(image=tf.constant(np.load({str(d / "x.npy")!r})))
        np.save({str(d / "y.npy")!r}, out["probs"].numpy())
        print(sorted(out))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "['probs']" in r.stdout
    np.testing.assert_allclose(np.load(d / "y.npy"), ref, rtol=1e-5, atol=1e-7)


@pytest.mark.tfbuild
def test_saved_model_cli_lists_signature(built):
    d, *_ = built
    r = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli",
                        "show", "--all", "--dir", str(d / "a.rstf" / "serving" / "model_a" / "1")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "signature_def['serving_default']" in r.stdout
    assert "inputs['image']" in r.stdout and "outputs['probs']" in r.stdout
    assert "(1, 6, 6, 2)" in r.stdout


@pytest.mark.tfbuild
def test_serving_ops_compile_to_static_library(built, tmp_path):
    """The Bazel package's sources build with plain gcc/g++ against the TF headers."""
    d, _, _, outs = built
    pkg = d / "a.rstf" / "serving_ops"
    build = (pkg / "BUILD").read_text()
    assert "alwayslink = 1" in build and 'name = "rstf_ops"' in build
    assert '"-march=native",' in build  # the target rstf optimize built for
    include = tf.sysconfig.get_include()
    objs = []
    for f in sorted(os.listdir(pkg)):
        src, obj = str(pkg / f), str(tmp_path / (f + ".o"))
        if f.endswith(".c"):
            cmd = ["gcc", "-std=c11", "-O2", "-fPIC", "-c", src, "-o", obj]
        elif f.endswith(".cc"):
            cmd = ["g++", "-std=c++17", "-O1", "-fPIC", "-w", "-I", str(pkg), "-I", include,
                   "-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64", "-c", src,
                   "-o", obj]
        else:
            continue
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        objs.append(obj)
    lib = str(tmp_path / "librstf_ops.a")
    assert subprocess.run(["ar", "rcs", lib, *objs]).returncode == 0
    syms = subprocess.run(["nm", "-C", lib], capture_output=True, text=True).stdout
    assert "rstf_sg_0" in syms and "Compute" in syms


@pytest.mark.tfbuild
def test_models_side_by_side_in_one_process(built):
    """Two models, and one model optimized twice with different options, in one process."""
    d, a, b, outs = built
    types = [{s["op_type"] for s in outs[k]["subgraphs"]} for k in outs]
    assert not (types[0] & types[1]) and not (types[0] & types[2])  # distinct op names
    xa = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    xb = rng.standard_normal((2, 5)).astype(np.float32)
    np.savez(d / "in.npz", a=xa, b=xb)
    ref_a = run_tf(make_graph_def(model_a), {"image": xa}, ["probs:0"])[0]
    r = fresh_python(f"""
        import json, numpy as np, rstf
        ins = np.load({str(d / "in.npz")!r})
        m1 = rstf.load({str(d / "a.rstf")!r})
        m2 = rstf.load({str(d / "a2.rstf")!r})
        m3 = rstf.load({str(d / "b.rstf")!r})
        y1 = m1(image=ins["a"])["probs"].numpy()
        y2 = m2(image=ins["a"])["probs"].numpy()
        y3 = m3(features=ins["b"])["scores"].numpy()
        np.savez({str(d / "side.npz")!r}, y1=y1, y2=y2, y3=y3)
        print(json.dumps([m1.input_names, m3.output_names]))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [["image"], ["scores"]]
    got = np.load(d / "side.npz")
    np.testing.assert_allclose(got["y1"], ref_a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["y2"], ref_a, rtol=1e-5, atol=1e-7)
    assert got["y3"].shape == (2, 4) and np.all(got["y3"] >= 0)
