"""Inception-v4 (Szegedy, Ioffe, Vanhoucke, Alemi 2016, "Inception-v4, Inception-ResNet and
the Impact of Residual Connections"), Figure 9, built from Keras layers.

Not in keras.applications. Blocks follow the paper's figures: stem (Fig. 3), Inception-A
(Fig. 4), Reduction-A (Fig. 7, k=192, l=224, m=256, n=384), Inception-B (Fig. 5),
Reduction-B (Fig. 8), Inception-C (Fig. 6); every convolution is Conv2D without bias, then
BatchNormalization (no scale, as the reference implementations) and ReLU. The head is
average pooling over the final 8x8 map (global, so smaller inputs work), dropout (a no-op in
inference) and a 1000-way softmax. About 42.7M parameters at 299x299.
"""
from __future__ import annotations


def inception_v4(input_shape=(299, 299, 3), classes: int = 1000):
    import keras
    from keras import layers

    def conv_bn(x, filters, rows, cols, strides=1, padding="same"):
        x = layers.Conv2D(filters, (rows, cols), strides=strides, padding=padding,
                          use_bias=False)(x)
        x = layers.BatchNormalization(axis=-1, scale=False)(x)
        return layers.Activation("relu")(x)

    def concat(xs):
        return layers.Concatenate(axis=-1)(xs)

    def max_pool(x):
        return layers.MaxPooling2D((3, 3), strides=2, padding="valid")(x)

    def avg_pool(x):
        return layers.AveragePooling2D((3, 3), strides=1, padding="same")(x)

    def stem(x):
        x = conv_bn(x, 32, 3, 3, strides=2, padding="valid")
        x = conv_bn(x, 32, 3, 3, padding="valid")
        x = conv_bn(x, 64, 3, 3)
        x = concat([max_pool(x), conv_bn(x, 96, 3, 3, strides=2, padding="valid")])
        a = conv_bn(conv_bn(x, 64, 1, 1), 96, 3, 3, padding="valid")
        b = conv_bn(x, 64, 1, 1)
        b = conv_bn(b, 64, 7, 1)
        b = conv_bn(b, 64, 1, 7)
        b = conv_bn(b, 96, 3, 3, padding="valid")
        x = concat([a, b])
        return concat([conv_bn(x, 192, 3, 3, strides=2, padding="valid"), max_pool(x)])

    def block_a(x):
        b0 = conv_bn(x, 96, 1, 1)
        b1 = conv_bn(conv_bn(x, 64, 1, 1), 96, 3, 3)
        b2 = conv_bn(conv_bn(conv_bn(x, 64, 1, 1), 96, 3, 3), 96, 3, 3)
        b3 = conv_bn(avg_pool(x), 96, 1, 1)
        return concat([b0, b1, b2, b3])

    def reduction_a(x, k=192, l=224, m=256, n=384):
        b0 = conv_bn(x, n, 3, 3, strides=2, padding="valid")
        b1 = conv_bn(conv_bn(conv_bn(x, k, 1, 1), l, 3, 3), m, 3, 3, strides=2,
                     padding="valid")
        return concat([b0, b1, max_pool(x)])

    def block_b(x):
        b0 = conv_bn(x, 384, 1, 1)
        b1 = conv_bn(conv_bn(conv_bn(x, 192, 1, 1), 224, 1, 7), 256, 7, 1)
        b2 = conv_bn(x, 192, 1, 1)
        b2 = conv_bn(b2, 192, 7, 1)
        b2 = conv_bn(b2, 224, 1, 7)
        b2 = conv_bn(b2, 224, 7, 1)
        b2 = conv_bn(b2, 256, 1, 7)
        b3 = conv_bn(avg_pool(x), 128, 1, 1)
        return concat([b0, b1, b2, b3])

    def reduction_b(x):
        b0 = conv_bn(conv_bn(x, 192, 1, 1), 192, 3, 3, strides=2, padding="valid")
        b1 = conv_bn(x, 256, 1, 1)
        b1 = conv_bn(b1, 256, 1, 7)
        b1 = conv_bn(b1, 320, 7, 1)
        b1 = conv_bn(b1, 320, 3, 3, strides=2, padding="valid")
        return concat([b0, b1, max_pool(x)])

    def block_c(x):
        b0 = conv_bn(x, 256, 1, 1)
        b1 = conv_bn(x, 384, 1, 1)
        b1 = concat([conv_bn(b1, 256, 1, 3), conv_bn(b1, 256, 3, 1)])
        b2 = conv_bn(x, 384, 1, 1)
        b2 = conv_bn(b2, 448, 3, 1)
        b2 = conv_bn(b2, 512, 1, 3)
        b2 = concat([conv_bn(b2, 256, 1, 3), conv_bn(b2, 256, 3, 1)])
        b3 = conv_bn(avg_pool(x), 256, 1, 1)
        return concat([b0, b1, b2, b3])

    inputs = keras.Input(shape=input_shape)
    x = stem(inputs)
    for _ in range(4):
        x = block_a(x)
    x = reduction_a(x)
    for _ in range(7):
        x = block_b(x)
    x = reduction_b(x)
    for _ in range(3):
        x = block_c(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(classes, activation="softmax", name="predictions")(x)
    return keras.Model(inputs, outputs, name="inception_v4")
