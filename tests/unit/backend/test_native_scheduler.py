"""The scheduler's queue (backend/src/work_queue.h) and cost model, through libbertserve_core.so: admission by
predicted work against each request's deadline, earliest deadline first, batches by rows and padded tokens."""

from __future__ import annotations

import ctypes

import pytest

from tests.unit.backend import native_core

MS = 1_000_000  # nanoseconds


class Queue:
    def __init__(self, lib: ctypes.CDLL, lanes: int = 1, by_arrival: bool = False) -> None:
        self.lib = lib
        self.handle = lib.bertserve_queue_new(lanes, int(by_arrival))

    def offer(self, id_, deadline_ms, work_ms, own_ms=None, rows=1, tokens=16, hard=False, now_ms=0.0):
        """(admitted, ms ahead); `standing_wait_ms`: refused because the queue stands, its predicted wait."""
        ahead, wait = ctypes.c_double(), ctypes.c_double()
        admitted = self.lib.bertserve_queue_offer(
            self.handle, id_, int(deadline_ms * MS), int(hard), rows, tokens, work_ms / 1e3,
            (work_ms if own_ms is None else own_ms) / 1e3, int(now_ms * MS), ctypes.byref(ahead), ctypes.byref(wait),
        )  # fmt: skip
        self.standing_wait_ms = wait.value * 1e3
        return bool(admitted), ahead.value * 1e3

    def set_standing(self, target_ms, interval_ms):
        self.lib.bertserve_queue_set_standing(self.handle, int(target_ms * MS), int(interval_ms * MS))

    def standing(self):
        return bool(self.lib.bertserve_queue_standing(self.handle))

    def wait_ratio(self):
        return self.lib.bertserve_queue_wait_ratio(self.handle)

    def take(self, now_ms=0.0, max_rows=128, max_tokens=1 << 20):
        batch, expired = (ctypes.c_uint64 * 64)(), (ctypes.c_uint64 * 64)()
        n_expired, work = ctypes.c_size_t(), ctypes.c_double()
        n = self.lib.bertserve_queue_take(
            self.handle, int(now_ms * MS), max_rows, max_tokens, batch, expired, ctypes.byref(n_expired), 64,
            ctypes.byref(work),
        )  # fmt: skip
        return list(batch[:n]), list(expired[: n_expired.value]), work.value * 1e3

    def done(self, work_ms):
        self.lib.bertserve_queue_done(self.handle, work_ms / 1e3)

    def backlog_ms(self):
        return self.lib.bertserve_queue_backlog(self.handle) * 1e3


@pytest.fixture(scope="module")
def lib():
    lib = native_core.load()
    lib.bertserve_queue_new.restype = ctypes.c_void_p
    lib.bertserve_queue_new.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.bertserve_queue_free.argtypes = [ctypes.c_void_p]
    lib.bertserve_queue_offer.argtypes = [
        ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_double, ctypes.c_double, ctypes.c_uint64, ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_double),
    ]  # fmt: skip
    lib.bertserve_queue_set_standing.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
    lib.bertserve_queue_standing.argtypes = [ctypes.c_void_p]
    lib.bertserve_queue_wait_ratio.restype = ctypes.c_double
    lib.bertserve_queue_wait_ratio.argtypes = [ctypes.c_void_p]
    lib.bertserve_queue_take.restype = ctypes.c_size_t
    lib.bertserve_queue_take.argtypes = [
        ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_double),
    ]  # fmt: skip
    lib.bertserve_queue_done.argtypes = [ctypes.c_void_p, ctypes.c_double]
    lib.bertserve_queue_backlog.restype = ctypes.c_double
    lib.bertserve_queue_backlog.argtypes = [ctypes.c_void_p]
    lib.bertserve_cost_fit_forward.restype = ctypes.c_double
    lib.bertserve_cost_fit_forward.argtypes = [
        ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_double,
        ctypes.c_int64, ctypes.c_int64,
    ]  # fmt: skip
    lib.bertserve_cost_request.argtypes = [
        ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
        ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int64),
    ]  # fmt: skip
    return lib


def request_cost(lib, alone: bool, rows: list[int], seqs: list[int]) -> tuple[float, float, int]:
    """(work, own forward) in ms and padded tokens of a request under the 2 ms / 12 ms fit, max_batch 32."""
    work, own, tokens = ctypes.c_double(), ctypes.c_double(), ctypes.c_int64()
    lib.bertserve_cost_request(
        2e-3, 12e-3, 32, 128, int(alone), (ctypes.c_int64 * len(rows))(*rows), (ctypes.c_int64 * len(seqs))(*seqs),
        len(seqs), ctypes.byref(work), ctypes.byref(own), ctypes.byref(tokens),
    )  # fmt: skip
    return work.value * 1e3, own.value * 1e3, tokens.value


def test_a_request_is_refused_when_the_work_ahead_would_make_it_miss_its_deadline(lib):
    q = Queue(lib)
    assert q.offer(1, deadline_ms=10, work_ms=6) == (True, 0.0)
    admitted, ahead = q.offer(2, deadline_ms=10, work_ms=6)
    assert not admitted and ahead == pytest.approx(6.0)
    assert q.offer(3, deadline_ms=60_000, work_ms=6) == (True, pytest.approx(6.0))  # a bulk request waits


def test_with_nothing_ahead_a_request_is_admitted_whatever_its_own_cost(lib):
    q = Queue(lib)
    assert q.offer(1, deadline_ms=10, work_ms=50)[0]


def test_only_work_due_no_later_counts_as_ahead_and_is_taken_first(lib):
    q = Queue(lib)
    assert q.offer(1, deadline_ms=60_000, work_ms=500, rows=32, tokens=32 * 16)[0]  # bulk, long deadline
    admitted, ahead = q.offer(2, deadline_ms=10, work_ms=1)  # interactive, behind it in arrival order
    assert admitted and ahead == 0.0
    batch, expired, work = q.take(max_rows=32)
    assert batch == [2] and expired == [] and work == pytest.approx(1.0)  # earliest deadline first; 2 + 32 > 32


def test_batches_are_bounded_by_rows_and_tokens_but_always_take_the_head(lib):
    q = Queue(lib)
    for i, rows in enumerate([40, 10, 10, 10]):
        q.offer(i, deadline_ms=1000 + i, work_ms=0.1, rows=rows, tokens=rows * 32)
    assert q.take(max_rows=32)[0] == [0]  # larger than a batch: alone
    assert q.take(max_rows=32, max_tokens=20 * 32)[0] == [1, 2]


def test_a_hard_deadline_expires_in_the_queue_a_default_one_does_not(lib):
    q = Queue(lib)
    q.offer(1, deadline_ms=5, work_ms=1, hard=True)
    q.offer(2, deadline_ms=5, work_ms=1, hard=False)
    batch, expired, _ = q.take(now_ms=6)
    assert expired == [1] and batch == [2]


def test_work_in_flight_counts_until_done_and_lanes_share_it(lib):
    q = Queue(lib, lanes=2)
    q.offer(1, deadline_ms=100, work_ms=8)
    assert q.backlog_ms() == pytest.approx(4.0)
    _, _, work = q.take()
    assert q.backlog_ms() == pytest.approx(4.0)  # in flight
    assert q.offer(2, deadline_ms=100, work_ms=2)[1] == pytest.approx(4.0)
    q.done(work)
    q.take()
    q.done(2.0)
    assert q.backlog_ms() == 0.0


def standing_queue(lib) -> Queue:
    """Ten requests without a deadline of their own (1 s default), 10 ms of work each, one every 6 ms (0-54 ms). The
    queue stands once every request taken for 50 ms had waited 20 ms or more while work came in faster than one lane
    drains it."""
    q = Queue(lib)
    q.set_standing(target_ms=20, interval_ms=50)
    for i in range(10):
        assert q.offer(i, deadline_ms=1000 + 6 * i, work_ms=10, now_ms=6 * i)[0]
    return q


def test_a_queue_that_stands_admits_only_requests_whose_predicted_wait_is_below_the_target(lib):
    q = standing_queue(lib)
    assert q.take(now_ms=60, max_rows=1)[0] == [0] and not q.standing()  # waited 60 ms: above since 60
    assert q.wait_ratio() == 1.0  # nothing was predicted ahead of request 0
    for i in range(10, 18):  # arrivals go on, 80 ms of work in 55 ms
        assert q.offer(i, deadline_ms=1066 + 6 * (i - 10), work_ms=10, now_ms=66 + 6 * (i - 10))[0]
    assert q.take(now_ms=115, max_rows=1)[0] == [1] and q.standing()  # above for 55 ms, past the interval
    # Request 1 was predicted to wait 10 ms and waited 109: waits are longer than the work ahead predicts.
    assert 1.0 < q.wait_ratio() < 10.9
    assert q.offer(18, deadline_ms=1116, work_ms=10, now_ms=116) == (False, pytest.approx(180.0))  # 2 in flight
    assert q.standing_wait_ms == pytest.approx(180.0 * q.wait_ratio())
    # A client's own deadline is never shortened: a bulk request that allows 60 s is admitted.
    assert q.offer(19, deadline_ms=60_116, work_ms=10, hard=True, now_ms=116)[0]
    while q.take(now_ms=120, max_rows=8)[0]:
        pass
    assert q.standing()  # emptied, by requests that waited long, and a batch still on the device
    assert not q.offer(20, deadline_ms=1121, work_ms=10, now_ms=121)[0]
    q.done(1000.0)  # every batch finished: the server has caught up
    # The next burst (a closed-loop client's, sent once the last was answered) finds it idle and is admitted whole.
    assert all(q.offer(i, deadline_ms=1200, work_ms=10, now_ms=200)[0] for i in range(21, 31))
    assert not q.standing()


def test_a_wait_shorter_than_the_interval_does_not_make_the_queue_stand(lib):
    q = standing_queue(lib)
    q.take(now_ms=60, max_rows=1)  # waited 60 ms: above the target from 60 ms
    q.take(now_ms=80, max_rows=1)  # 20 ms later: not yet the interval
    assert q.offer(10, deadline_ms=1000, work_ms=10, now_ms=85)[0]  # due first
    assert q.take(now_ms=90, max_rows=1)[0] == [10]  # waited 5 ms: below the target, the count starts again
    q.take(now_ms=100, max_rows=1)
    q.take(now_ms=140, max_rows=1)
    assert not q.standing()  # above for 40 ms only
    assert q.offer(11, deadline_ms=1141, work_ms=10, now_ms=141)[0]  # the deadline alone decides


@pytest.mark.parametrize(
    ("clients", "work_ms", "per_batch"),
    [(4, 45, 1), (8, 30, 2)],  # answered one at a time; two at a time by batches longer than the interval
    ids=["one-per-batch", "two-per-batch"],
)
def test_closed_loop_clients_at_capacity_never_make_the_queue_stand(lib, clients, work_ms, per_batch):
    """Clients that each send again when answered wait far past the target, but in each run of long waits the work
    they admit stays within a batch of the work drained: nothing is refused."""
    q = Queue(lib)
    q.set_standing(target_ms=20, interval_ms=50)
    now, next_id = 0.0, clients
    assert all(q.offer(i, deadline_ms=1000, work_ms=work_ms, now_ms=now)[0] for i in range(clients))
    for _ in range(60):
        batch, _, work = q.take(now_ms=now, max_rows=per_batch)
        now += work
        q.done(work)
        for _ in batch:  # each client answered sends again
            admitted, _ = q.offer(next_id, deadline_ms=now + 1000, work_ms=work_ms, now_ms=now)
            assert admitted and not q.standing(), (now, q.standing_wait_ms)
            next_id += 1


def test_an_open_overload_makes_the_queue_stand_within_about_an_interval(lib):
    """Arrivals of 10 ms of work every 10/3 ms (3x what one lane drains), taken four at a time whenever the lane is
    free (each batch done when it lands): the queue stands within the interval and a batch of every request taken
    having waited past the target, and then refuses by predicted wait."""
    q = Queue(lib)
    q.set_standing(target_ms=20, interval_ms=50)
    arrived: dict[int, float] = {}
    queued, free_at, landing, above_at, stood_at = 0, 0.0, 0.0, None, None
    for tick in range(2000):  # 1 s in 0.5 ms steps
        now = tick * 0.5
        if now >= len(arrived) * 10 / 3:  # the next arrival is due
            arrived[len(arrived)] = now
            queued += q.offer(len(arrived) - 1, deadline_ms=now + 1000, work_ms=10, now_ms=now)[0]
        if now >= free_at and queued:
            q.done(landing)  # the batch on the lane landed
            batch, _, landing = q.take(now_ms=now, max_rows=4)
            queued -= len(batch)
            free_at = now + landing
            if any(now - arrived[i] < 20 for i in batch):
                above_at = None  # a wait below the target: the run of long waits starts again
            elif above_at is None:
                above_at = now
        if q.standing():
            stood_at = now
            break
    assert above_at is not None and stood_at is not None and stood_at - above_at <= 50 + 40, (above_at, stood_at)
    assert not q.offer(10_000, deadline_ms=stood_at + 1000, work_ms=10, now_ms=stood_at)[0]
    assert q.standing_wait_ms >= 20


def test_a_burst_is_admitted_whole_however_long_the_queue_would_stand(lib):
    q = Queue(lib)
    q.set_standing(target_ms=20, interval_ms=50)
    assert all(q.offer(i, deadline_ms=1000, work_ms=10)[0] for i in range(95))  # 950 ms of work, one deadline
    assert not q.offer(95, deadline_ms=1000, work_ms=100)[0] and q.standing_wait_ms == 0.0  # by the deadline


def test_the_cost_model_is_linear_in_tokens_and_follows_what_batches_take(lib):
    # 1 x 16 tokens 2 ms, 8 x 64 tokens 12 ms: 10 ms over 496 more tokens, and the rest fixed per forward.
    token = 10e-3 / 496
    expected = 2e-3 - 16 * token + 4 * 32 * token
    assert lib.bertserve_cost_fit_forward(2e-3, 12e-3, 32, 128, 0, 1.0, 4, 32) == pytest.approx(expected)
    assert lib.bertserve_cost_fit_forward(2e-3, 12e-3, 32, 128, 0, 1.0, 3, 20) == pytest.approx(expected)  # bucketed
    # Batches that take three times the prediction (a machine busier than at load) move it there.
    assert lib.bertserve_cost_fit_forward(2e-3, 12e-3, 32, 128, 200, 3.0, 4, 32) == pytest.approx(
        3 * expected, rel=0.02
    )


def test_by_arrival_every_queued_request_is_ahead_and_batches_keep_their_order(lib):
    edf, fifo = Queue(lib), Queue(lib, by_arrival=True)
    for q in (edf, fifo):
        assert q.offer(1, deadline_ms=60_000, work_ms=6, rows=8)[0]  # a bulk request with a long timeout
    # An interactive request behind it: earliest deadline first it goes ahead; by arrival it waits for the bulk.
    assert edf.offer(2, deadline_ms=10, work_ms=1) == (True, 0.0)
    assert fifo.offer(2, deadline_ms=10, work_ms=1) == (True, pytest.approx(6.0))
    assert edf.take(max_rows=8)[0] == [2]
    assert fifo.take(max_rows=8)[0] == [1]


def test_bulk_work_does_not_ride_along_past_an_interactive_deadline(lib):
    q = Queue(lib)
    assert q.offer(1, deadline_ms=60_000, work_ms=20, rows=16)[0]  # bulk: a 20 ms forward, a minute to wait
    assert q.offer(2, deadline_ms=10, work_ms=1)[0]  # interactive: 1 ms alone, due in 10 ms
    assert q.take()[0] == [2]  # together they would take 21 ms, past the interactive deadline
    assert q.take()[0] == [1]
    q.done(21)
    assert q.offer(3, deadline_ms=60_000, work_ms=5, rows=4)[0]
    assert q.offer(4, deadline_ms=10, work_ms=1)[0]
    assert q.take()[0] == [4, 3]  # 6 ms together: inside it, so the batch fills


def test_a_batch_that_misses_its_deadline_anyway_is_filled(lib):
    q = Queue(lib)
    assert q.offer(1, deadline_ms=60_000, work_ms=20, rows=16)[0]
    assert q.offer(2, deadline_ms=10, work_ms=1)[0]
    assert q.take(now_ms=9.5)[0] == [2, 1]  # 0.5 ms left for a 1 ms forward: holding the bulk back saves nothing


def forward_ms(lib, batch: int, seq: int) -> float:
    return lib.bertserve_cost_fit_forward(2e-3, 12e-3, 32, 128, 0, 1.0, batch, seq) * 1e3


def test_a_request_served_alone_asks_all_of_its_forwards_time_under_load_too(lib):
    # rerank: 1 query x 20 documents in forwards of at most 8 pairs, padded to each forward's longest pair
    work, own, tokens = request_cost(lib, True, [8, 8, 4], [40, 64, 20])
    expected = forward_ms(lib, 8, 40) + forward_ms(lib, 8, 64) + forward_ms(lib, 4, 20)
    assert own == pytest.approx(expected) and work == pytest.approx(expected)  # no batch to share: all its own
    assert tokens == 8 * 48 + 8 * 64 + 4 * 32  # padded to the length buckets (40 -> 48)
    # embed's rows share full batches with other requests': under load each row takes its share only
    shared, alone, _ = request_cost(lib, False, [0, 0, 0], [40, 64, 20])
    assert shared < alone == pytest.approx(forward_ms(lib, 3, 64))


def test_requests_served_alone_are_taken_one_at_a_time_and_refused_behind_one_in_flight(lib):
    q = Queue(lib)
    work, own, tokens = request_cost(lib, True, [8, 8, 8, 8], [64, 64, 64, 64])  # 32 documents of ~60 tokens
    for i in (1, 2):
        assert q.offer(i, deadline_ms=60_000, work_ms=work, own_ms=own, rows=32, tokens=tokens)[0]
    assert q.take(max_rows=1, max_tokens=1)[0] == [1]  # one request at a time: its rows are already a batch
    # due before the queued one, but the one in flight and its own forwards take longer than its 5 ms
    admitted, ahead = q.offer(3, deadline_ms=5, work_ms=work, own_ms=own, rows=32, tokens=tokens, hard=True)
    assert not admitted and ahead == pytest.approx(work)
    assert q.backlog_ms() == pytest.approx(2 * work)
    q.done(work)
    assert q.take(max_rows=1, max_tokens=1)[0] == [2]
    q.done(work)
    assert q.backlog_ms() == 0.0
