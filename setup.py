"""The one build setting pyproject.toml cannot say: the notebook series (``notebooks/``, where a checkout
keeps it for readers and Colab) ships inside the wheel as the package folder ``lstmnb/series``, so a plain
``pip install`` runs it from any folder (lstmnb/notebooks/series.py finds either)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["lstmnb", "lstmnb.*"]) + ["lstmnb.series"],
    package_dir={"lstmnb.series": "notebooks"},
    package_data={"lstmnb.series": ["[0-9][0-9]_*.ipynb"]},
)
