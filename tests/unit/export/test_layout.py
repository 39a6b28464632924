"""The offline exporter stands apart from the server's launcher: importing every export module loads none of it."""

from __future__ import annotations

import subprocess
import sys

EXPORT_MODULES = ("export.__main__", "export.pipeline", "export.rerank", "export.several", "export.repository")


def test_export_imports_nothing_of_the_launcher_or_the_gateway():
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {EXPORT_MODULES!r}]; "
        "print(' '.join(m for m in sys.modules if m.startswith(('serving.launcher', 'serving.gateway'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
