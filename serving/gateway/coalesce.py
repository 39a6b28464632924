"""Texts of concurrent requests sent to the text model as one call.

A Python gRPC call costs the gateway about 0.4 ms of CPU whatever it carries, as much as the rest of a request's
handling, and on a CPU host that time is taken from the model. So requests wait here while ``max_inflight`` calls are
out, and the next call carries every waiting request's texts (up to the model's max_batch_size); with fewer calls out,
a request goes at once, so one client alone waits for nothing. The model batches what arrives during a forward
anyway: what the gateway joins, it would have joined.

A call that fails for bad input is sent again one request at a time, so that a bad text fails only its own request
and its message names the element by the request's own index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from serving.gateway import errors
from serving.gateway.triton import Embedded

Send = Callable[[list[bytes], bool], Awaitable[Embedded]]


@dataclass
class _Waiting:
    texts: list[bytes]
    answer: asyncio.Future


class Coalescer:
    def __init__(self, send: Send, max_batch: int, max_inflight: int = 2) -> None:
        self.send, self.max_batch, self.max_inflight = send, max_batch, max_inflight
        self.waiting: dict[bool, list[_Waiting]] = {False: [], True: []}  # by truncate
        self.inflight = 0
        self.tasks: set[asyncio.Task] = set()

    async def embed(self, texts: list[bytes], truncate: bool) -> Embedded:
        if len(texts) >= self.max_batch:
            return await self.send(texts, truncate)
        waiting = _Waiting(texts, asyncio.get_running_loop().create_future())
        self.waiting[truncate].append(waiting)
        self._dispatch()
        return await waiting.answer

    def _dispatch(self) -> None:
        while self.inflight < self.max_inflight:
            key = max(self.waiting, key=lambda k: len(self.waiting[k]))
            queue = self.waiting[key]
            if not queue:
                return
            group, size = [], 0
            while queue and size + len(queue[0].texts) <= self.max_batch:
                size += len(queue[0].texts)
                group.append(queue.pop(0))
            self.inflight += 1
            task = asyncio.create_task(self._call(group, key))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _call(self, group: list[_Waiting], truncate: bool) -> None:
        try:
            out = await self.send([t for w in group for t in w.texts], truncate)
            _answer(group, out)
        except errors.BadRequest as e:
            if len(group) == 1:
                _fail(group[0], e)
            else:
                await asyncio.gather(*(self._alone(w, truncate) for w in group))
        except Exception as e:  # overload, not ready, internal: every request of the call has it
            for w in group:
                _fail(w, e)
        finally:
            self.inflight -= 1
            self._dispatch()

    async def _alone(self, waiting: _Waiting, truncate: bool) -> None:
        try:
            _answer([waiting], await self.send(waiting.texts, truncate))
        except Exception as e:
            _fail(waiting, e)


def _answer(group: list[_Waiting], out: Embedded) -> None:
    start = 0
    for w in group:
        end = start + len(w.texts)
        tokens = out.tokens[start:end] if out.tokens is not None else None
        if not w.answer.done():  # a client that went away cancelled it
            w.answer.set_result(Embedded(np.ascontiguousarray(out.vectors[start:end]), tokens))
        start = end


def _fail(waiting: _Waiting, e: BaseException) -> None:
    if not waiting.answer.done():
        waiting.answer.set_exception(e)
