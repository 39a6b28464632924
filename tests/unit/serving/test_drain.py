"""The shutdown drain: ensembles are unloaded and waited for before tritonserver gets SIGTERM."""

from __future__ import annotations

from serving import admin as admin_module
from serving.admin import drain_then_stop


class FakeAdmin:
    def __init__(self, states: list[dict[str, str]], fail: bool = False) -> None:
        self.calls: list[str] = []
        self._states, self.fail = states, fail

    def unload(self, model: str) -> None:
        self.calls.append(f"unload {model}")
        if self.fail:
            raise ConnectionRefusedError("refused")

    def states(self) -> dict[str, str]:
        self.calls.append("states")
        return self._states.pop(0) if len(self._states) > 1 else self._states[0]


class FakeProcess:
    def __init__(self, calls: list[str]) -> None:
        self.calls, self.code = calls, None

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.calls.append("terminate")
        self.code = 0


def test_terminates_only_after_the_ensemble_has_unloaded(monkeypatch):
    monkeypatch.setattr(admin_module, "DRAIN_POLL_S", 0.0)
    admin = FakeAdmin([{"embed": "READY"}, {"embed": "UNLOADING"}, {"embed": "UNAVAILABLE"}])
    drain_then_stop(admin, FakeProcess(admin.calls), ["embed"], timeout_s=5)
    assert admin.calls == ["unload embed", "states", "states", "states", "terminate"]


def test_terminates_at_the_deadline_when_the_ensemble_never_unloads(monkeypatch, caplog):
    monkeypatch.setattr(admin_module, "DRAIN_POLL_S", 0.0)
    admin = FakeAdmin([{"embed": "UNLOADING"}])
    drain_then_stop(admin, FakeProcess(admin.calls), ["embed"], timeout_s=0.05)
    assert admin.calls[0] == "unload embed" and admin.calls[-1] == "terminate"
    assert "still had requests in flight" in caplog.text


def test_terminates_at_once_when_the_admin_api_fails():
    admin = FakeAdmin([{"embed": "READY"}], fail=True)
    drain_then_stop(admin, FakeProcess(admin.calls), ["embed"], timeout_s=5)
    assert admin.calls == ["unload embed", "terminate"]


def test_without_ensembles_terminates_at_once():
    admin = FakeAdmin([{}])
    drain_then_stop(admin, FakeProcess(admin.calls), [], timeout_s=5)
    assert admin.calls == ["states", "terminate"]
