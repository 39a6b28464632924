"""`python -m loadtest`: exit 0 SLO met, 1 SLO breached, 2 could not run (with a one-line reason)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from loadtest import EXIT_COULD_NOT_RUN, CouldNotRunError
from loadtest.config import ConfigError, load_config

logger = logging.getLogger("loadtest")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from loadtest.runner import run

    try:
        config = load_config(argv)
        return run(config, sys.stdout)
    except (ConfigError, CouldNotRunError) as exc:
        sys.stderr.write(f"loadtest: could not run: {exc}\n")
        return EXIT_COULD_NOT_RUN
    except KeyboardInterrupt:
        sys.stderr.write("loadtest: could not run: interrupted\n")
        return EXIT_COULD_NOT_RUN


if __name__ == "__main__":
    sys.exit(main())
