"""Installs the `rstf` package and the `rstf` command."""
from setuptools import find_packages, setup

BENCH = ["onnxruntime==1.32.0", "tf2onnx==1.17.0", "onnx==1.23.2", "openvino==2026.4.1"]

TUNE = ["scikit-learn==1.9.1", "scipy==1.17.1"]

setup(
    name="rstf",
    version="0.1.0",
    description="Polyhedral optimizer for TensorFlow graphs: generated, shape-specialised custom ops",
    packages=find_packages(include=["rstf", "rstf.*"]),
    package_data={"rstf": ["templates/*.j2", "templates/ops/*.j2", "runtime/*.h", "runtime/*.c",
                           "serving/tf_client.c"]},
    include_package_data=True,
    python_requires=">=3.11,<3.12",
    install_requires=[
        "tensorflow-cpu==2.21.0",
        "networkx==3.6.1",
        "pymetis==2025.2.2",
        "pycparser==3.0",
        "islpy==2026.2.2",
        "jinja2==3.1.6",
        "numpy==2.4.6",
        "rich==15.0.0",
        "matplotlib==3.11.2",  # `rstf bench --plot`
    ],
    extras_require={
        # The other engines of `rstf bench`; without them they show as "not installed".
        "bench": BENCH,
        # `rstf tune`'s learned tile model (rstf/tuner/learned.py).
        "tune": TUNE,
        "test": ["pytest==9.0.3", "pytest-xdist==3.8.0", "hypothesis==6.155.2", *BENCH, *TUNE],
    },
    entry_points={"console_scripts": ["rstf=rstf.cli:main"]},
)
