"""The serving side: ``launcher/`` starts tritonserver, ``python_backend/`` runs in its Python stubs, ``contract/``
is the model repository's contract with export, ``client.py`` is what clients import."""
