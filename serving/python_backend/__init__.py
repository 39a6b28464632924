"""What runs inside tritonserver's Python-backend stub processes: the model files under ``models/`` (export copies
each into the repository as its ``model.py``) and what they share: collation, the artifact runtime, metrics, errors."""
