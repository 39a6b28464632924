"""Third-party messages every export prints and none of which needs the user: said once, as what they are.

Each artifact is held to eager fp32 by the accuracy gate, so what the tracers and exporters warn about (a traced
branch, an ONNX operator emulated with several) is checked there, on the real outputs. Setting PYTHONWARNINGS
(e.g. ``PYTHONWARNINGS=default``) shows the warnings again; the log lines are the libraries' own.
"""

from __future__ import annotations

import logging
import os
import warnings

# (message start, module issuing it) of the Python warnings hidden, whatever their category.
HIDDEN_WARNINGS = (
    ("Converting a tensor to a Python boolean", "transformers"),  # torch.jit's TracerWarning tracing HF's BERT
    ("`is_gradient_checkpointing` is deprecated", "transformers"),
    ("TypedStorage is deprecated", "torch._inductor"),  # Inductor's own autotuning code
    ("Exporting aten::index operator", "torch.onnx"),
)


class _Once(logging.Filter):
    """torchao's notes that its CUDA and Triton kernels cannot load under a CPU build of torch: one info line."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        import torch  # loaded already: torchao logs this while it is imported

        message = record.getMessage()
        if torch.version.cuda is not None or not message.startswith(("Failed to load", "Warning: Detected no triton")):
            return True
        if self.said:
            return False
        self.said = True
        record.levelno, record.levelname, record.name = logging.INFO, "INFO", "torchao"
        record.msg, record.args = (
            "torchao's CUDA and Triton kernels do not load under this CPU build of torch (not used)",
            (),
        )
        return True


def quiet_third_parties() -> None:
    once = _Once()
    for name in ("torchao", "torchao.kernel.intmm"):
        logging.getLogger(name).addFilter(once)
    # torchao registers enums with torch's pytree at import; torch now says each is deprecated, once per enum
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    if os.environ.get("PYTHONWARNINGS"):
        return
    for message, module in HIDDEN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
