#!/usr/bin/env bash
# Set up rstf: the system packages of the other C optimizers and of `rstf inspect --svg`
# (clang-14 with Polly, graphviz), then rstf itself with its test dependencies, and keras-hub for models/build.py's BERTs.
# Usage: bash scripts/setup.sh   (apt-get needs root; sudo is used when not root)
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(clang-14 libpolly-14-dev graphviz)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${packages[@]}"
fi
python3 -m pip install -q -e '.[test]'
# keras-hub for the BERT reference models, without its dependencies (why: the file's header)
python3 -m pip install -q --no-deps -r requirements-models.txt
