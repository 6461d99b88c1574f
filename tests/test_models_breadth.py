"""models/breadth.py: the breadth sweep's models build deterministically with the contract's
names, and two of them, which once left ops to TensorFlow (Llama's rotary Split and
grouped-query Tile; Swin's Roll and Unpack), are generated whole and match TensorFlow."""
import json

import pytest

from models.breadth import BREADTH, build_breadth


def test_names_and_unknown():
    assert {"vit", "swin", "segformer", "gpt2", "llama", "deberta", "unet", "fpn"} <= \
        set(BREADTH)
    with pytest.raises(ValueError, match="unknown breadth model 'resnet'"):
        build_breadth("resnet")


def test_decoder_deterministic_with_contract_names():
    a, rng_a = build_breadth("unet")
    b, _ = build_breadth("unet")
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    ops = {n.op for n in a.node}
    assert {"Conv2DBackpropInput", "ResizeBilinear", "ConcatV2"} <= ops
    names = {n.name: n.op for n in a.node}
    assert names["input"] == "Placeholder" and names["output"] == "Identity"
    assert rng_a == (0.0, 1.0)


@pytest.mark.parametrize("name,ops", [("llama", {"Split", "Tile"}),
                                      ("swin", {"Roll", "Unpack"})])
def test_generated_whole(name, ops, tmp_path):
    pytest.importorskip("keras_hub")
    from rstf import api
    from rstf.evaluation.compare import compare

    gd, _ = build_breadth(name)
    assert ops <= {n.op for n in gd.node}
    pb = tmp_path / f"{name}.pb"
    pb.write_bytes(gd.SerializeToString())
    out = tmp_path / f"{name}.rstf"
    api.optimize(str(pb), str(out))
    report = json.loads((out / "report.json").read_text())
    assert report["nodes_covered"] == report["nodes_total"], report["unsupported"]
    assert len(report["subgraphs"]) <= 3
    result = compare(str(pb), str(out), latency=False)
    assert result["passed"], result
