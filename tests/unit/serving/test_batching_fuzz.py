"""Property test: any ids/mask pair either validates into lengths that collate, or is one known RequestError."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from serving.python_backend import batching
from serving.python_backend.errors import RequestError
from serving.python_backend.metrics import REASONS

VOCAB, MAX_SEQ = 1000, 64
shapes = st.tuples(st.integers(1, 3), st.integers(0, MAX_SEQ + 8))
ints = st.integers(-5, VOCAB + 5)


@st.composite
def pairs(draw):
    ids = draw(arrays(np.int64, draw(shapes), elements=ints))
    same = draw(st.booleans())
    mask_shape = ids.shape if same else draw(shapes)
    mask = draw(arrays(np.int64, mask_shape, elements=st.sampled_from([0, 1, 1, 1, 2, -1])))
    return ids, mask


@settings(max_examples=3000, deadline=None)
@given(pairs())
def test_every_input_validates_or_fails_with_a_known_reason(pair):
    ids, mask = pair
    try:
        lengths = batching.validate(ids, mask, VOCAB, MAX_SEQ)
    except RequestError as e:
        assert e.reason in REASONS and str(e)
        return
    assert ((ids >= 0) & (ids < VOCAB)).all() and np.isin(mask, (0, 1)).all()
    collated = batching.collate({0: (ids, mask, lengths)}, batching.length_buckets(MAX_SEQ), None)
    rows = sorted(r for g in collated.groups for _, r in g.rows)
    assert rows == list(range(ids.shape[0]))
    assert collated.real_tokens == int(mask.sum())
