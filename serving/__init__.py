"""Runtime: the Triton Python-backend models, the server launcher and the client."""
