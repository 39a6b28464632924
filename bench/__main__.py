"""``python -m bench``: time every inference path and write reports/bench-<device>.{json,md}."""

from __future__ import annotations

import logging
import sys

from bench.config import parse_args
from bench.report import markdown_report, write
from bench.run import run


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    report = run(cfg)
    json_path, md_path = write(report, cfg.output_dir)
    sys.stdout.write(markdown_report(report))
    logging.getLogger("bench").info("wrote %s and %s", json_path, md_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
