"""Export hides the third-party noise it knows and says torchao's kernel notes once, leaving other warnings alone."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from export import quiet


@pytest.fixture()
def quieted(monkeypatch):
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    loggers = [logging.getLogger(n) for n in ("torchao", "torchao.kernel.intmm", "torch.utils._pytree")]
    saved = [(lg, list(lg.filters), lg.level) for lg in loggers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.quiet_third_parties()
        yield caught
    for lg, filters, level in saved:
        lg.filters[:] = filters
        lg.setLevel(level)


def _warn(message: str, module: str) -> None:
    warnings.warn_explicit(message, torch.jit.TracerWarning, f"{module.replace('.', '/')}.py", 1, module=module)


def test_known_warnings_are_hidden_and_others_shown(quieted):
    _warn(
        "Converting a tensor to a Python boolean might cause the trace to be incorrect.", "transformers.masking_utils"
    )
    _warn("Converting a tensor to a Python boolean might cause the trace to be incorrect.", "mymodel.layers")
    _warn("something else entirely", "transformers.masking_utils")
    assert [str(w.message) for w in quieted] == [
        "Converting a tensor to a Python boolean might cause the trace to be incorrect.",
        "something else entirely",
    ]


@pytest.mark.skipif(torch.version.cuda is not None, reason="the note is for a CPU build of torch")
def test_torchaos_kernel_notes_are_one_info_line(quieted, caplog):
    caplog.set_level(logging.DEBUG)
    logging.getLogger("torchao").warning("Failed to load library libtorchao_ops_aten.so")
    logging.getLogger("torchao").warning("Failed to load library libtorchao_cuda.so")
    logging.getLogger("torchao.kernel.intmm").warning("Warning: Detected no triton, on systems without Triton ...")
    logging.getLogger("torchao").warning("a real problem")
    assert [(r.levelname, r.getMessage()[:30]) for r in caplog.records] == [
        ("INFO", "torchao's CUDA and Triton kern"),
        ("WARNING", "a real problem"),
    ]
