"""The backend stubs' garbage collector: what a model loads at start-up is frozen out of every later collection.

A stub with torch and a loaded model holds ~200k Python objects; a full collection walks all of them (40-75 ms
on this 2-core CPU, several times that when the cores are contended) and runs in the middle of a request.
After ``settle()`` the collector only walks what requests allocate.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect once, then move every surviving object to the permanent generation (call at the end of start-up)."""
    gc.collect()
    gc.freeze()
