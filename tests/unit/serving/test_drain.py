"""The shutdown drain: ensembles are unloaded and waited for before tritonserver gets SIGTERM."""

from __future__ import annotations

import subprocess

from serving.launcher import admin as admin_module
from serving.launcher.admin import drain_then_stop


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
    def __init__(self, calls: list[str], lingers: bool = False) -> None:
        self.calls, self.code, self.lingers = calls, None, lingers

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.calls.append("terminate")
        if not self.lingers:
            self.code = 0

    def wait(self, timeout: float | None = None) -> int:
        if self.code is None:
            self.calls.append(f"wait {timeout:.0f}" if timeout is not None else "wait")
            if timeout is not None:
                raise subprocess.TimeoutExpired("tritonserver", timeout)
        return self.code

    def kill(self) -> None:
        self.calls.append("kill")
        self.code = -9


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
    assert admin.calls == ["terminate"]


def test_unloads_the_other_models_after_the_ensembles_and_before_sigterm(monkeypatch):
    monkeypatch.setattr(admin_module, "DRAIN_POLL_S", 0.0)
    admin = FakeAdmin(
        [
            {"embed": "UNLOADING", "tokenizer": "READY", "bert": "READY"},
            {"embed": "UNAVAILABLE", "tokenizer": "READY", "bert": "READY"},
            {"embed": "UNAVAILABLE", "tokenizer": "UNLOADING", "bert": "UNAVAILABLE"},
            {"embed": "UNAVAILABLE", "tokenizer": "UNAVAILABLE", "bert": "UNAVAILABLE"},
        ]
    )
    drained = drain_then_stop(
        admin, FakeProcess(admin.calls), ["embed"], timeout_s=5, models=["embed", "tokenizer", "bert"]
    )
    assert drained is True
    assert admin.calls == [
        "unload embed", "states", "states",
        "unload tokenizer", "unload bert", "states", "states",
        "terminate",
    ]  # fmt: skip


def test_kills_tritonserver_held_by_idle_connections_at_the_end_of_the_budget(monkeypatch, caplog):
    monkeypatch.setattr(admin_module, "DRAIN_POLL_S", 0.0)
    monkeypatch.setattr(admin_module, "STOP_GRACE_S", 0.0)
    admin = FakeAdmin([{"embed": "UNAVAILABLE", "bert": "UNAVAILABLE"}])
    proc = FakeProcess(admin.calls, lingers=True)
    assert drain_then_stop(admin, proc, ["embed"], timeout_s=0.5, models=["embed", "bert"]) is True
    assert admin.calls[-3:] == ["terminate", "wait 0", "kill"]
    assert "idle client connections" in caplog.text and "nothing was in flight" in caplog.text
