"""``python -m export``: run the export pipeline; a clear message and exit 1 on any export error."""

from __future__ import annotations

import logging
import sys

from export.config import parse_args
from export.errors import ExportError


class _CudaOnlyKernels(logging.Filter):
    """torchao warns for each of its CUDA-only kernel libraries that a CPU build of torch cannot load; say it once,
    as what it is, instead of as warnings a user cannot tell from real failures."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        import torch  # loaded already: torchao logs this while it is imported

        if torch.version.cuda is not None or not record.getMessage().startswith("Failed to load"):
            return True
        if not self.said:
            self.said = True
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = (
                "torchao's CUDA-only kernels do not load under this CPU build of torch (not used)",
                (),
            )
            return True
        return False


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("torchao").addFilter(_CudaOnlyKernels())
    try:
        cfg = parse_args(argv)
        from export.pipeline import run  # heavy imports after the arguments are known good

        run(cfg)
    except ExportError as e:
        logging.getLogger("export").error("export failed: %s: %s", type(e).__name__, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
