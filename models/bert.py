"""Frozen GraphDefs of BERT encoders (keras-hub's ``BertBackbone``) with fixed random weights.

Used by ``models/build.py bert_small`` / ``bert_base`` (and by the tests, at tiny sizes).
keras-hub is an optional dependency: ``pip install --no-deps -r requirements-models.txt``.

Contract of :func:`build_bert_graph_def`:

* A ``GraphDef`` with no variables: every weight is a ``Const``.
* Three int32 ``Placeholder`` inputs of shape ``[batch, seq_len]`` (``batch`` None: unknown):
  ``token_ids`` (ids in ``[0, vocabulary)``), ``segment_ids`` (0 or 1) and ``padding_mask``
  (1 for a real token, 0 for padding).
* Two float32 outputs, ``Identity`` nodes that nothing consumes: ``sequence_output``
  ``[batch, seq_len, hidden]`` (the last encoder layer's output: every token, so an error
  anywhere in the encoder shows) and ``pooled_output`` ``[batch, hidden]`` (the tanh pooler
  over the first token, what a classifier head reads). Every node feeds one of them.
* Weights come only from ``numpy.random.RandomState(seed)`` (never keras' RNG, never a
  download), so the same arguments give byte-identical files.

Weight rules (BERT's own initialisation, then checked): every kernel and embedding is
normal with std 0.02, clipped at 2 std (BERT's truncated normal); biases normal with std
0.02; layer-norm gammas 1 + N(0, 0.05^2) and betas N(0, 0.05^2), so no scale is exactly
1 and no shift exactly 0 (an identity layer norm would hide a wrong epilogue). With these,
BERT's post-norm layers keep every layer-norm output at std about 1 through any depth, and
the pooler's pre-activation std is 0.02 sqrt(hidden) (0.45 for bert_small, 0.55 for
bert_base): its tanh is not saturated, so no deterministic rescaling is needed
(``tests/test_models_build.py`` checks both on a tiny encoder).
"""
from __future__ import annotations

import numpy as np

# name -> BertBackbone keyword arguments (vocabulary and max_sequence_length: BERT's own).
BERT_MODELS: dict[str, dict] = {
    "bert_small": dict(vocabulary_size=30522, num_layers=4, num_heads=8, hidden_dim=512,
                       intermediate_dim=2048, max_sequence_length=512),
    "bert_base": dict(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                      intermediate_dim=3072, max_sequence_length=512),
}
BERT_INPUTS = ("token_ids", "segment_ids", "padding_mask")
BERT_OUTPUTS = ("sequence_output", "pooled_output")
DEFAULT_SEQ_LEN = 128
WEIGHT_STD = 0.02  # BERT's initializer_range
NORM_STD = 0.05  # spread of layer-norm gammas around 1 and of betas around 0


def _weight_values(path: str, shape, rng: np.random.RandomState) -> np.ndarray:
    """One weight's values by its keras path (module docstring's rules)."""
    leaf = path.rsplit("/", 1)[-1]
    if leaf == "gamma":
        return 1.0 + NORM_STD * rng.standard_normal(shape)
    if leaf == "beta":
        return NORM_STD * rng.standard_normal(shape)
    values = WEIGHT_STD * rng.standard_normal(shape)
    if leaf == "bias":
        return values
    return np.clip(values, -2 * WEIGHT_STD, 2 * WEIGHT_STD)


def build_backbone(config: dict, seed: int = 0):
    """A ``keras_hub.models.BertBackbone(**config)`` with the module's weight rules.

    Calls ``keras.backend.clear_session()`` first: keras names layers from a global
    counter, and the names become node names, so a second build would otherwise differ.
    Raises ValueError when ``config`` does not build (keras-hub's own message).
    """
    import keras
    import keras_hub

    keras.backend.clear_session()
    model = keras_hub.models.BertBackbone(**config)
    rng = np.random.RandomState(seed)
    for w in model.weights:  # a fixed order: the model's own
        w.assign(_weight_values(w.path, tuple(w.shape), rng).astype(w.dtype))
    return model


def build_bert_graph_def(name: str, seq_len: int | None = DEFAULT_SEQ_LEN, batch: int | None = 1,
                         seed: int = 0, config: dict | None = None):
    """The frozen inference GraphDef of BERT model ``name`` (``BERT_MODELS``), or of
    ``config`` (BertBackbone keyword arguments; then ``name`` only labels errors).

    ``seq_len`` None leaves the sequence length unknown ([batch, ?] inputs), as an encoder
    exported for requests of any length is.

    Raises ValueError for an unknown name or a ``seq_len`` outside [1, max_sequence_length].
    """
    if config is None:
        if name not in BERT_MODELS:
            raise ValueError(f"unknown model {name!r}")
        config = BERT_MODELS[name]
    if seq_len is not None and not 1 <= seq_len <= config["max_sequence_length"]:
        raise ValueError(f"{name}: --seq-len {seq_len} outside [1, "
                         f"{config['max_sequence_length']}]")
    import tensorflow as tf

    try:  # imported as models.bert, or from the script models/build.py
        from .freeze import freeze_function
    except ImportError:
        from freeze import freeze_function

    model = build_backbone(config, seed)

    @tf.function(autograph=False)
    def infer(token_ids, segment_ids, padding_mask):
        out = model({"token_ids": token_ids, "segment_ids": segment_ids,
                     "padding_mask": padding_mask}, training=False)
        return (tf.identity(out["sequence_output"], name=BERT_OUTPUTS[0]),
                tf.identity(out["pooled_output"], name=BERT_OUTPUTS[1]))

    specs = [tf.TensorSpec([batch, seq_len], tf.int32, name=n) for n in BERT_INPUTS]
    graph_def = _sorted_nodes(
        freeze_function(infer.get_concrete_function(*specs), BERT_OUTPUTS))
    ops = {n.name: n.op for n in graph_def.node}
    for n in BERT_INPUTS:
        if ops.get(n) != "Placeholder":
            raise RuntimeError(f"frozen graph has no Placeholder named {n!r}")
    return graph_def


def _sorted_nodes(graph_def):
    """The same graph with its nodes in one fixed topological order (Kahn's algorithm, the
    ready node with the smallest name first). Why: the frozen graph's node order varies
    from build to build in one process (keras-hub's graph is traced afresh each time), and
    the contract is byte-identical files."""
    import heapq

    nodes = {n.name: n for n in graph_def.node}
    deps = {name: {i.lstrip("^").split(":")[0] for i in n.input} for name, n in nodes.items()}
    users: dict[str, list[str]] = {name: [] for name in nodes}
    for name, ds in deps.items():
        for d in ds:
            users[d].append(name)
    waiting = {name: len(ds) for name, ds in deps.items()}
    ready = [name for name, k in waiting.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(nodes[name])
        for u in users[name]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(order)  # copies: the original's nodes stay where they were
    return out
