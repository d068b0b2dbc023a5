# Progress bar on stderr for LLM.generate: tqdm when installed, else a plain one-line bar. Invariant: writes only
# to stderr, and only when enabled.
from __future__ import annotations

import sys
import time


class _PlainBar:
    def __init__(self, total: int) -> None:
        self.total, self.n, self.start = total, 0, time.monotonic()
        self._draw()

    def update(self, k: int = 1) -> None:
        self.n += k
        self._draw()

    def _draw(self) -> None:
        width = 30
        filled = width * self.n // self.total if self.total else width
        rate = self.n / max(time.monotonic() - self.start, 1e-9)
        sys.stderr.write(f"\rProcessed prompts: {self.n}/{self.total} [{'#' * filled}{' ' * (width - filled)}] "
                         f"{rate:.1f} it/s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class _NoBar:
    def update(self, k: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainBar(total)
    return tqdm(total=total, desc="Processed prompts", file=sys.stderr, dynamic_ncols=True)
