"""Errors of stock TensorFlow and of rstf output folders against a float64 run of the same
graph (every float32 attribute and constant widened), relative to the largest output.

    [TF_ENABLE_ONEDNN_OPTS=0|1] python benchmarks/fidelity_truth.py MODEL.pb SIZE OUTDIR...
                                        [--input-range LO,HI]

MODEL.pb is a reference model of models/build.py (input `input` [1,SIZE,SIZE,3], output
`output`), fed images uniform in [0, 1) (or [LO, HI)) of seeds 0, 1, 2. One line per seed: TF's own error
(Eigen or oneDNN, by the environment) and each output folder's. Where rstf's error against
TF Eigen is larger than TF's own spread (oneDNN against Eigen), this tells whether rstf is
further from the exact result, or only computes in another order than TF's two engines,
which round alike.
"""
import os, sys, subprocess, numpy as np, json
os.environ["TF_CPP_MIN_LOG_LEVEL"]="2"
args = sys.argv[1:]
lo, hi = 0.0, 1.0
if "--input-range" in args:
    i = args.index("--input-range")
    lo, hi = map(float, args[i + 1].split(","))
    del args[i:i + 2]
model, size = args[0], int(args[1]); outs = args[2:]
import tensorflow as tf
from rstf.evaluation.exact import widen_graph_def
gd=tf.compat.v1.GraphDef(); gd.ParseFromString(open(model,'rb').read())
g64=widen_graph_def(gd)
def run(gdef, x):
    g=tf.Graph()
    with g.as_default(): tf.import_graph_def(gdef,name="")
    with tf.compat.v1.Session(graph=g) as s: return s.run("output:0",{"input:0":x})
import rstf
res={}
for seed in range(3):
    x=np.random.RandomState(seed).uniform(lo,hi,(1,size,size,3)).astype(np.float32)
    T=run(g64,x.astype(np.float64)); sc=np.abs(T).max()
    e=lambda y: float(np.abs(y.astype(np.float64)-T).max()/sc)
    line=[f"seed {seed}: TF(this process) {e(run(gd,x)):.2e}"]
    for o in outs:
        m=rstf.load(o); line.append(f"{os.path.basename(o)} {e(np.asarray(m(input=x)['output'])):.2e}")
    print("  ".join(line), flush=True)
