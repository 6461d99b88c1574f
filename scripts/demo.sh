#!/usr/bin/env bash
# Set up rstf and run the main job on the default model: build Inception v3 (fixed random
# weights), optimize it, and compare it with stock TensorFlow (numbers and speed).
# Usage: bash scripts/demo.sh [MODEL]   (inception_v3, resnet50 or mobilenet_v2)
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-inception_v3}"
bash scripts/setup.sh
mkdir -p out
python3 models/build.py "$model" -o "out/$model.pb"
rstf optimize "out/$model.pb" -o "out/$model.rstf" --force
rstf compare "out/$model.pb" "out/$model.rstf"
