"""The demo's bundles, installed as the data package `laya_edge_models`.

This folder is the repository's `models/`; pyproject.toml maps it into the wheel under that name
(`package-dir`), with `demo.json`, the bundles it names and the model card as package data, so
that `laya-edge demo` runs from an installed wheel too (laya_edge/demo.py, `models_dir`). There is
no code here.
"""
