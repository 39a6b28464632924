"""Bounded fault, overload and soak runs against the real tritonserver, on loopback (``python -m reliability``)."""
