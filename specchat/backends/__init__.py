"""Model backends: one model behind the small interface in `base.Backend`."""

from specchat.backends.base import Backend

__all__ = ["Backend"]
