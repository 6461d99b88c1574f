"""Neural-network layer ops beyond convolution: depthwise convolution, padding, batch norm."""
from __future__ import annotations
