"""What starts tritonserver and stops it: the launcher process (``python -m serving``), its configuration, the
drain through the model-control API, the native backend's installation, and N replicas behind nginx."""
