"""``python -m serving``: start tritonserver on the exported repository (foreground)."""

from __future__ import annotations

import logging
import sys

from serving.launcher.config import parse_args
from serving.launcher.server import LaunchError, serve


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return serve(parse_args(argv))
    except LaunchError as e:
        logging.getLogger("serving").error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
