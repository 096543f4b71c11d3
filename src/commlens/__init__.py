"""commlens: show, measure and predict the communication of distributed training."""

from __future__ import annotations

__version__ = "0.1.0"
