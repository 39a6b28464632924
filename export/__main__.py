"""``python -m export``: run the export pipeline; a clear message and exit 1 on any export error."""

from __future__ import annotations

import logging
import sys

from export.config import parse_args
from export.errors import ExportError
from export.quiet import quiet_third_parties


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_third_parties()
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
