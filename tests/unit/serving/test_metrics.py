"""The metric recorder: updates leave the request path, keep their order, none queued is lost at close, and the
queue is bounded."""

from __future__ import annotations

import threading

from serving.python_backend.metrics import REASONS, ModelMetrics, Recorder


class FakeMetric:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name
        self.thread: str | None = None

    def observe(self, value: float) -> None:
        self.thread = threading.current_thread().name
        self.log.append((self.name, "observe", value))

    def increment(self, value: float) -> None:
        self.thread = threading.current_thread().name
        self.log.append((self.name, "increment", value))


class FakePbUtils:
    """pb_utils' MetricFamily/Metric surface; every update lands in ``log`` as (series, op, value)."""

    def __init__(self) -> None:
        self.log: list = []
        log = self.log

        class MetricFamily:
            HISTOGRAM, COUNTER = "histogram", "counter"

            def __init__(self, name: str, description: str, kind: str) -> None:
                self.name = name

            def Metric(self, labels: dict, buckets: list | None = None) -> FakeMetric:  # noqa: N802 (pb_utils' name)
                return FakeMetric(log, f"{self.name}{sorted(labels.items())}")

        self.MetricFamily = MetricFamily


def test_updates_run_off_the_calling_thread_in_order_and_close_drains_them():
    pb = FakePbUtils()
    metrics = ModelMetrics(pb, "bert", stages=("infer",))
    for i in range(500):
        metrics.request.observe(i / 1000)
        metrics.tokens.increment(i)
    metrics.failures["too_long"].increment(1)
    metrics.close()
    observed = [v for name, op, v in pb.log if name.startswith("bertserve_request_duration") and op == "observe"]
    assert observed == [i / 1000 for i in range(500)]
    assert sum(v for name, _, v in pb.log if name.startswith("bertserve_tokens_total")) == sum(range(500))
    assert [n for n, _, _ in pb.log if "failures" in n] == [
        "bertserve_failures_total[('model', 'bert'), ('reason', 'too_long')]"
    ]
    assert metrics.request._metric.thread == "bertserve-metrics"
    assert set(metrics.failures) == set(REASONS)


def test_a_failing_update_does_not_stop_the_ones_after_it():
    done: list[float] = []

    def broken(_: float) -> None:
        raise RuntimeError("metric family deleted")

    recorder = Recorder()
    recorder.submit(broken, 1.0)
    recorder.submit(done.append, 2.0)
    recorder.close()
    assert done == [2.0]


def test_a_recorder_that_falls_behind_drops_and_counts_instead_of_queueing_without_bound():
    started, release, done = threading.Event(), threading.Event(), []
    recorder = Recorder(capacity=10)
    recorder.submit(lambda _: (started.set(), release.wait(10)), 0.0)  # holds the recorder thread
    assert started.wait(10)  # taken off the queue: the ten places are free
    for i in range(1000):
        recorder.submit(done.append, float(i))
    assert recorder.dropped == 990
    release.set()
    recorder.close()
    assert done == [float(i) for i in range(10)]
