"""Concurrent requests share calls to the model; a bad text fails only its own request."""

from __future__ import annotations

import asyncio

import numpy as np

from serving.gateway import errors
from serving.gateway.coalesce import Coalescer
from serving.gateway.triton import Embedded


class Model:
    def __init__(self) -> None:
        self.calls: list[list[bytes]] = []
        self.release = asyncio.Event()

    async def send(self, texts: list[bytes], truncate: bool) -> Embedded:
        self.calls.append(texts)
        await self.release.wait()
        if b"" in texts:
            raise errors.BadRequest(f"TEXT element {texts.index(b'')} is empty")
        vectors = np.array([[len(t), 0] for t in texts], dtype=np.float32)
        return Embedded(vectors, np.array([len(t) for t in texts]))


def test_requests_wait_while_calls_are_out_and_then_share_one():
    async def run():
        model = Model()
        c = Coalescer(model.send, max_batch=8, max_inflight=1)
        first = asyncio.ensure_future(c.embed([b"a"], False))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(c.embed([b"x" * n], False)) for n in (2, 3, 4)]
        await asyncio.sleep(0)
        model.release.set()
        answers = await asyncio.gather(first, *rest)
        return model.calls, answers

    calls, answers = asyncio.run(run())
    assert calls == [[b"a"], [b"xx", b"xxx", b"xxxx"]]  # the first went at once
    assert [a.vectors[0, 0] for a in answers] == [1, 2, 3, 4] and [int(a.tokens[0]) for a in answers] == [1, 2, 3, 4]


def test_a_bad_text_fails_only_its_own_request():
    async def run():
        model = Model()
        c = Coalescer(model.send, max_batch=8, max_inflight=1)
        busy = asyncio.ensure_future(c.embed([b"a"], False))
        await asyncio.sleep(0)
        good = asyncio.ensure_future(c.embed([b"bb"], False))
        bad = asyncio.ensure_future(c.embed([b"ok", b""], False))
        model.release.set()
        return await asyncio.gather(busy, good, bad, return_exceptions=True)

    busy, good, bad = asyncio.run(run())
    assert good.vectors[0, 0] == 2
    assert isinstance(bad, errors.BadRequest) and "element 1" in bad.message  # its own index, not the shared call's


def test_requests_of_max_batch_texts_go_alone():
    async def run():
        model = Model()
        model.release.set()
        c = Coalescer(model.send, max_batch=2)
        await c.embed([b"a", b"b"], True)
        return model.calls

    assert asyncio.run(run()) == [[b"a", b"b"]]


def test_calls_never_mix_truncation():
    async def run():
        model = Model()
        seen = []

        async def send(texts, truncate):
            seen.append((texts, truncate))
            return await model.send(texts, truncate)

        c = Coalescer(send, max_batch=8, max_inflight=1)
        first = asyncio.ensure_future(c.embed([b"a"], False))
        await asyncio.sleep(0)
        other = [asyncio.ensure_future(c.embed([b"b"], t)) for t in (False, True, False)]
        await asyncio.sleep(0)
        model.release.set()
        await asyncio.gather(first, *other)
        return seen

    assert sorted(asyncio.run(run())) == [([b"a"], False), ([b"b"], True), ([b"b", b"b"], False)]
