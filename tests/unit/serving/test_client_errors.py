from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from serving.client import DeadlineExceeded, EmbedClient, EmbedError, InvalidInput, NotFound, Unavailable, map_error


@pytest.mark.parametrize(
    ("status", "message", "cls"),
    [
        ("StatusCode.INVALID_ARGUMENT", "TEXT is empty", InvalidInput),
        ("400", "TEXT is empty", InvalidInput),
        ("StatusCode.UNAVAILABLE", "failed to connect", Unavailable),
        ("503", "queue full", Unavailable),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", DeadlineExceeded),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'x' is not found", NotFound),
        ("400", "Request for unknown model: 'x' is not found", NotFound),
        ("StatusCode.INTERNAL", "boom", EmbedError),
        (None, "connection refused", Unavailable),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'embed' has no available versions", Unavailable),
    ],
)
def test_every_status_maps_to_one_exception(status, message, cls):
    err = map_error(InferenceServerException(message, status=status))
    assert type(err) is cls and message in str(err)


def test_unreachable_server_is_retried_then_unavailable():
    c = EmbedClient("127.0.0.1:1", timeout_s=0.5, retries=2, backoff_s=0.01)
    with pytest.raises(Unavailable):
        c.embed(["hello"])
    c.close()


def test_no_texts_is_invalid_input():
    c = EmbedClient("127.0.0.1:1")
    with pytest.raises(InvalidInput, match="no texts"):
        c.embed([])
    c.close()


def test_backoff_is_capped_and_bounded_by_the_deadline():
    import time

    c = EmbedClient("127.0.0.1:1", retries=20, backoff_s=0.1)
    far = time.monotonic() + 100
    assert c._delay(0, far) == 0.1 and c._delay(10, far) == 1.0
    assert c._delay(20, far) is None  # out of retries
    assert c._delay(0, time.monotonic() + 0.01) is None  # no retry fits in the deadline
    c.close()
