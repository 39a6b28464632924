"""The directory the launcher installs tritonserver's backends into is private to the user who runs it."""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from serving.launcher import native, server, stubs


@pytest.fixture()
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bundled tritonserver's stub and Python backend, and a temporary directory of the test's own."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = tmp_path / "tritonserver"
    (root / "python_backend_stubs" / version).mkdir(parents=True)
    (root / "python_backend_stubs" / version / stubs.STUB).write_bytes(b"stub")
    (root / "backends" / "python").mkdir(parents=True)
    (root / "backends" / "python" / "libtriton_python.so").write_bytes(b"python backend")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(native, "LIBRARY", tmp_path / "not-built.so")
    return root


def expected_dir(uid: int | None = None) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    build = hashlib.sha256(str(native.LIBRARY.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"bertserve-backends-{os.getuid() if uid is None else uid}-py{version}-{build}"


def assert_private(path: Path) -> None:
    st = path.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_the_backend_directory_is_created_private(bundle):
    dest = server._bundled_backends(bundle)
    assert dest == expected_dir()
    assert_private(dest)
    assert (dest / "python" / stubs.STUB).read_bytes() == b"stub"


def test_an_open_directory_of_ones_own_is_closed(bundle):
    expected_dir().mkdir(mode=0o777)
    expected_dir().chmod(0o777)
    assert server._bundled_backends(bundle) == expected_dir()
    assert_private(expected_dir())


def test_a_planted_symlink_is_not_followed(bundle, tmp_path):
    planted = tmp_path / "planted"
    (planted / "python").mkdir(parents=True)
    (planted / "python" / stubs.STUB).write_bytes(b"evil")  # the size of the real one: reused before
    expected_dir().symlink_to(planted)
    dest = server._bundled_backends(bundle)
    assert dest != expected_dir() and dest.resolve() != planted
    assert_private(dest)
    assert (dest / "python" / stubs.STUB).read_bytes() == b"stub"
    assert (planted / "python" / stubs.STUB).read_bytes() == b"evil"


def test_another_users_directory_is_not_used(bundle, monkeypatch):
    other = os.getuid() + 1
    foreign = expected_dir(other)
    foreign.mkdir()  # owned by the test's user, so another user's to the launcher that runs as uid + 1
    monkeypatch.setattr(os, "getuid", lambda: other)
    dest = server._bundled_backends(bundle)
    assert dest.parent == foreign.parent and dest.name.startswith(foreign.name + "-")
    assert not any(foreign.iterdir())


def test_two_builds_install_their_libraries_apart(bundle, tmp_path, monkeypatch):
    """A build newer than another checkout's (or of the same size) must not leave a server loading the other's
    library, linked against a torch that may be gone."""
    dests = []
    for name, content in (("a", b"library a"), ("b", b"library b")):
        library = tmp_path / name / native.LIBRARY_NAME
        library.parent.mkdir()
        library.write_bytes(content)
        monkeypatch.setattr(native, "LIBRARY", library)
        dests.append(server._bundled_backends(bundle))
    assert dests[0] != dests[1]
    assert [(d / native.NAME / native.LIBRARY_NAME).read_bytes() for d in dests] == [b"library a", b"library b"]


def test_launchers_installing_at_once_do_not_take_each_others_copy(tmp_path, monkeypatch):
    """`make serve REPLICAS=N` starts N launchers together: a second one installs while the first is copying."""
    library = tmp_path / "build" / native.LIBRARY_NAME
    library.parent.mkdir()
    library.write_bytes(b"library")
    monkeypatch.setattr(native, "LIBRARY", library)
    copy, pid, nested = native.shutil.copy2, os.getpid(), []

    def copy_while_another_installs(src, dst):
        copy(src, dst)
        if not nested:
            nested.append(dst)
            monkeypatch.setattr(native.os, "getpid", lambda: pid + 1)  # the other launcher
            assert native.install(tmp_path / "backends")
            monkeypatch.setattr(native.os, "getpid", lambda: pid)

    monkeypatch.setattr(native.shutil, "copy2", copy_while_another_installs)
    assert native.install(tmp_path / "backends")
    installed = tmp_path / "backends" / native.NAME
    assert [p.name for p in installed.iterdir()] == [native.LIBRARY_NAME]
    assert (installed / native.LIBRARY_NAME).read_bytes() == b"library"
