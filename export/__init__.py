"""Offline export: a BERT checkpoint into a Triton model repository (see ``python -m export --help``)."""
