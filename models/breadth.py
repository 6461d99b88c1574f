"""Model classes beyond the CNN zoo and BERT, small and with fixed random weights: the models
of the breadth sweep (``benchmarks/zoo.py --models breadth``) and of ``models/build.py
NAME`` for the names in ``BREADTH``.

- keras-hub 0.32 backbones (the ``models`` extra): vision transformers (ViT; Swin, shifted
  windows; SegFormer's MiT, overlapping patches and reduced keys), decoders (GPT-2; Llama:
  rotary embeddings, grouped-query attention, RMS norm, SwiGLU) and more encoders
  (DistilBERT, RoBERTa, XLM-R, ELECTRA, ALBERT, DeBERTa v3, FNet). Two layers of hidden 256
  (four stages for Swin and MiT) keep each one's structure at a size a 2-core sweep runs.
- Keras decoders, which keras.applications lacks: a U-Net (Conv2DTranspose up-convolutions,
  skip concatenations, a bilinear upsampling at the end) and an FPN-style neck (nearest
  upsampling by 2, as detectors use).

Weights come only from ``numpy.random.RandomState(seed)``. keras-hub models take
``models.bert``'s rules (BERT's initialisation: normal std 0.02 clipped at 2 std, layer-norm
gammas near 1 and betas near 0), under which layer norms keep every layer O(1). The Keras
decoders have no normalisation: He-normal kernels and biases of std 0.05, so activations
stay O(1) through their few ReLU layers.

Inputs: images float32 [1, H, H, 3], fed uniform in [0, 1) (the range returned with the
graph); token models int32 [1, 128] ``token_ids`` (``rstf compare`` draws them below the
embedding table's rows) and ``padding_mask`` (and ``segment_ids`` where the backbone has
it). Outputs: an Identity per backbone output, named after it (``sequence_output``,
``pooled_output``, ...), or ``output`` for the decoders.

Contract: ``build_breadth(name, seed=0) -> (GraphDef, input range)``; the same arguments give
the same graph, node for node.
"""
from __future__ import annotations

import numpy as np

_H = dict(num_layers=2, num_heads=4, hidden_dim=256)
_TEXT = dict(intermediate_dim=1024, **_H)
SEQ_LEN = 128
IMAGE = 224

# name -> (keras_hub.models class, keyword arguments)
HUB: dict[str, tuple[str, dict]] = {
    "vit": ("ViTBackbone", dict(image_shape=(IMAGE, IMAGE, 3), patch_size=16, mlp_dim=1024,
                                **_H)),
    "swin": ("SwinTransformerBackbone", dict(image_shape=(IMAGE, IMAGE, 3), embed_dim=64,
                                             depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16],
                                             window_size=7, patch_size=4)),
    "segformer": ("MiTBackbone", dict(
        layerwise_depths=[2, 2, 2, 2], num_layers=4, layerwise_num_heads=[1, 2, 5, 8],
        layerwise_sr_ratios=[8, 4, 2, 1], max_drop_path_rate=0.0,
        layerwise_patch_sizes=[7, 3, 3, 3], layerwise_strides=[4, 2, 2, 2],
        image_shape=(IMAGE, IMAGE, 3), hidden_dims=[32, 64, 160, 256])),
    "gpt2": ("GPT2Backbone", dict(vocabulary_size=50257, max_sequence_length=1024, **_TEXT)),
    "llama": ("LlamaBackbone", dict(vocabulary_size=32000, num_query_heads=4,
                                    num_key_value_heads=2, hidden_dim=256,
                                    intermediate_dim=688, num_layers=2)),
    "distilbert": ("DistilBertBackbone", dict(vocabulary_size=30522,
                                              max_sequence_length=512, **_TEXT)),
    "roberta": ("RobertaBackbone", dict(vocabulary_size=50265, max_sequence_length=512,
                                        **_TEXT)),
    "xlmr": ("XLMRobertaBackbone", dict(vocabulary_size=50000, max_sequence_length=512,
                                        **_TEXT)),
    "electra": ("ElectraBackbone", dict(vocab_size=30522, embedding_dim=128,
                                        max_sequence_length=512, **_TEXT)),
    "albert": ("AlbertBackbone", dict(vocabulary_size=30000, num_groups=1,
                                      num_inner_repetitions=1, embedding_dim=128,
                                      max_sequence_length=512, **_TEXT)),
    "deberta": ("DebertaV3Backbone", dict(vocabulary_size=30000, bucket_size=64,
                                          max_sequence_length=512, **_TEXT)),
    "fnet": ("FNetBackbone", dict(vocabulary_size=30000, max_sequence_length=512,
                                  num_layers=2, hidden_dim=256, intermediate_dim=1024)),
}
DECODERS = ("unet", "fpn")
BREADTH = (*HUB, *DECODERS)
UNIT_RANGE = (0.0, 1.0)


def build_breadth(name: str, seed: int = 0):
    """(the frozen GraphDef of breadth model `name`, the input range to feed its images).
    Raises ValueError for a name not in BREADTH."""
    if name not in BREADTH:
        raise ValueError(f"unknown breadth model {name!r}; valid: {', '.join(BREADTH)}")
    import keras
    import tensorflow as tf

    keras.backend.clear_session()
    rng = np.random.RandomState(seed)
    if name in HUB:
        model, specs = _hub_model(name, rng)
    else:
        model = _unet() if name == "unet" else _fpn()
        _assign_he(model, rng)
        specs = {"input": tf.TensorSpec(model.inputs[0].shape, tf.float32, name="input")}
    return _freeze(model, specs), UNIT_RANGE


def _hub_model(name: str, rng):
    import keras_hub
    import tensorflow as tf

    try:  # imported as models.breadth, or from the script models/build.py
        from .bert import _weight_values
    except ImportError:
        from bert import _weight_values

    cls, config = HUB[name]
    model = getattr(keras_hub.models, cls)(**config)
    for w in model.weights:  # a fixed order: the model's own
        w.assign(_weight_values(w.path, tuple(w.shape), rng).astype(w.dtype))
    if isinstance(model.input, dict):
        specs = {k: tf.TensorSpec([1, SEQ_LEN], tf.int32, name=k) for k in model.input}
    else:
        specs = {"images": tf.TensorSpec([1, IMAGE, IMAGE, 3], tf.float32, name="images")}
    return model, specs


def _freeze(model, specs: dict):
    import tensorflow as tf

    try:
        from .freeze import freeze_function
    except ImportError:
        from freeze import freeze_function

    names = list(specs)

    def infer(*args):
        arg = dict(zip(names, args)) if isinstance(model.input, dict) else args[0]
        out = model(arg, training=False)
        if isinstance(out, dict):
            return tuple(tf.identity(v, name=k) for k, v in sorted(out.items()))
        return (tf.identity(out, name="output" if names == ["input"] else "sequence_output"),)

    fn = tf.function(infer, autograph=False)
    concrete = fn.get_concrete_function(*specs.values())
    return freeze_function(concrete, [o.name.split(":")[0] for o in concrete.outputs])


def _assign_he(model, rng) -> None:
    for w in model.weights:
        shape = tuple(int(d) for d in w.shape)
        if len(shape) > 1:  # a kernel: He normal over its fan-in (a transposed one's too)
            fan_in = int(np.prod(shape[:-2])) * shape[-1] if "transpose" in w.path \
                else int(np.prod(shape[:-1]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        else:
            value = rng.standard_normal(shape) * 0.05
        w.assign(value.astype(np.float32))


def _unet(size: int = 128):
    from keras import Input, Model, layers as L

    x = inp = Input((size, size, 3), batch_size=1, name="input")
    skips = []
    for f in (16, 32, 64):
        x = L.Conv2D(f, 3, padding="same", activation="relu")(x)
        x = L.Conv2D(f, 3, padding="same", activation="relu")(x)
        skips.append(x)
        x = L.MaxPool2D()(x)
    x = L.Conv2D(128, 3, padding="same", activation="relu")(x)
    for f, s in zip((64, 32, 16), skips[::-1]):
        x = L.Conv2DTranspose(f, 2, strides=2, padding="same", name=f"up_transpose_{f}")(x)
        x = L.Concatenate()([x, s])
        x = L.Conv2D(f, 3, padding="same", activation="relu")(x)
    x = L.UpSampling2D(interpolation="bilinear")(x)
    return Model(inp, L.Conv2D(2, 1)(x))


def _fpn(size: int = 128):
    from keras import Input, Model, layers as L

    x = inp = Input((size, size, 3), batch_size=1, name="input")
    x = L.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    c3 = L.Conv2D(64, 3, strides=2, padding="same", activation="relu")(x)
    c4 = L.Conv2D(128, 3, strides=2, padding="same", activation="relu")(c3)
    p4 = L.Conv2D(64, 1)(c4)
    p3 = L.Add()([L.UpSampling2D()(p4), L.Conv2D(64, 1)(c3)])
    p3 = L.Conv2D(64, 3, padding="same", activation="relu")(p3)
    return Model(inp, L.Conv2D(16, 1)(L.UpSampling2D()(p3)))
