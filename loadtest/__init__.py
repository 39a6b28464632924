"""gRPC/HTTP load tester for the Triton embedding service: closed and open loop, HDR percentiles, SLO verdict."""

EXIT_MET = 0
EXIT_BREACHED = 1
EXIT_COULD_NOT_RUN = 2


class CouldNotRunError(RuntimeError):
    """The load test could not produce a verdict (server down, model not ready, bad arguments)."""
