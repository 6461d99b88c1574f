"""RegNetX (Radosavovic, Kosaraju, Girshick, He, Dollar 2020, "Designing Network Design
Spaces"), built from Keras layers: the grouped-convolution CNNs the zoo sweep needs.

keras.applications (keras 3) has no RegNet, and no other grouped-convolution model but
ConvNeXt's depthwise ones. The architecture follows the paper's Figure 3/4 and keras 2's
`keras.applications.regnet` (the same stage depths, widths and group widths, Table 6 of
the paper's appendix, `RegNetX002` ... `RegNetX032`):

* stem: 3x3 stride-2 convolution to 32 channels, batch norm, ReLU;
* four stages of X blocks; the first block of each halves the map (stride 2). An X block
  is a 1x1 convolution, batch norm, ReLU; a 3x3 *grouped* convolution (groups = width /
  group width) with the block's stride, batch norm, ReLU; a 1x1 convolution and batch
  norm; the shortcut (a 1x1 stride-2 convolution and batch norm where the shape changes)
  added, then ReLU. Bottleneck ratio 1: every convolution of a stage has its width;
* head: global average pooling and a 1000-way softmax.

Every convolution is without bias (batch norm follows each), as in the reference.
"""
from __future__ import annotations

# name -> (stage depths, stage widths, group width)
REGNETX: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {
    "RegNetX002": ((1, 1, 4, 7), (24, 56, 152, 368), 8),
    "RegNetX004": ((1, 2, 7, 12), (32, 64, 160, 384), 16),
    "RegNetX008": ((1, 3, 7, 5), (64, 128, 288, 672), 16),
    "RegNetX016": ((2, 4, 10, 2), (72, 168, 408, 912), 24),
    "RegNetX032": ((2, 6, 15, 2), (96, 192, 432, 1008), 48),
}


def regnet_x(variant: str, input_shape=(224, 224, 3), classes: int = 1000):
    """The keras Model of RegNetX `variant` (a key of `REGNETX`), softmax output."""
    import keras
    from keras import layers

    depths, widths, group_width = REGNETX[variant]

    def conv_bn(x, filters, kernel, strides=1, groups=1, relu=True):
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", groups=groups,
                          use_bias=False)(x)
        x = layers.BatchNormalization(axis=-1, epsilon=1e-5)(x)
        return layers.ReLU()(x) if relu else x

    def x_block(x, width, stride):
        shortcut = x
        if stride != 1 or x.shape[-1] != width:
            shortcut = conv_bn(x, width, 1, strides=stride, relu=False)
        y = conv_bn(x, width, 1)
        y = conv_bn(y, width, 3, strides=stride, groups=width // group_width)
        y = conv_bn(y, width, 1, relu=False)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    inputs = keras.Input(shape=input_shape)
    x = conv_bn(inputs, 32, 3, strides=2)
    for depth, width in zip(depths, widths):
        for i in range(depth):
            x = x_block(x, width, 2 if i == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name=variant.lower())
