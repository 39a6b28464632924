"""The serving side: ``launcher/`` starts tritonserver, ``python_backend/`` runs in its Python stubs, ``repository/``
is the contract with export, ``client.py`` is what clients import."""
