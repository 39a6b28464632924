"""The backend's failure reasons: one enum whose names label bertserve_failures_total and whose kind decides the
status; every reason the Python backend counts is one of them."""

from __future__ import annotations

import pytest

from serving.python_backend.metrics import REASONS
from tests.unit.backend import native_core


@pytest.fixture(scope="module")
def reasons() -> dict[str, str]:
    return native_core.failure_reasons(native_core.load())


def test_refusals_and_internal_failures_have_their_own_kind(reasons):
    reasons = dict(reasons)
    assert reasons.pop("queue_full") == reasons.pop("queue_timeout") == "refused"
    assert reasons.pop("internal") == "internal"
    assert set(reasons.values()) == {"bad_input"}


def test_every_python_reason_is_a_native_one(reasons):
    assert set(REASONS) <= set(reasons), set(REASONS) - set(reasons)
    assert {"too_long", "bad_output", "invalid_utf8", "empty_text", "text_too_large"} <= set(reasons)
