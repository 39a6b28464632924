"""In-process benchmark of every inference path on the same seeded inputs (``python -m bench``)."""
