"""Named, timed pipeline steps behind one progress bar."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

log = logging.getLogger(__name__)


class Steps:
    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, unit="step", bar_format="{l_bar}{bar:20}| {n}/{total} [{elapsed}]")
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.bar.set_description(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - start
            self.seconds[name] = round(took, 2)
            self.bar.update(1)
            self.bar.write(f"  {name}: {took:.1f} s")

    def close(self) -> None:
        self.bar.close()
