"""The reply as the engine commits it: ids, text decoded as it grows, and the stop checks that
read them (end of generation, a stop string, the token limit without ending mid-character)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

from specchat.engine.backend import Backend
from specchat.engine.events import StopReason

MAX_CHAR_COMPLETION = 4
"""Extra tokens allowed so a reply never ends inside a UTF-8 character."""


@dataclass
class GenerationSettings:
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    baseline_steps: int = 0
    """Time this many plain target steps in a speculative turn for its speedup (engine/
    baseline.py; their tokens are dropped again, their time is not the reply's). 0: no
    baseline is measured."""


class CommittedReply:
    def __init__(self, target: Backend, settings: GenerationSettings) -> None:
        self.target = target
        self.settings = settings
        self.ids: list[int] = []
        self.text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.stop_reason = StopReason.NONE

    def add(self, token: int) -> str | None:
        """Commit one token; return the text it adds, or None if it ends the reply unseen."""
        if self.target.is_eog(token):
            self.stop_reason = StopReason.EOS
            return None
        piece = self._decoder.decode(self.target.token_bytes(token))
        self.ids.append(token)
        scan_from = max(0, len(self.text) - max((len(s) for s in self.settings.stop), default=0))
        self.text += piece
        for stop in self.settings.stop:
            at = self.text.find(stop, scan_from)
            if at >= 0:
                self.text = self.text[:at]
                self.stop_reason = StopReason.STOP_STRING
                return piece
        mid_char = bool(self._decoder.getstate()[0])
        limit = self.settings.max_tokens + (MAX_CHAR_COMPLETION if mid_char else 0)
        if len(self.ids) >= limit or (len(self.ids) >= self.settings.max_tokens and not mid_char):
            self.stop_reason = StopReason.MAX_TOKENS
        return piece

    def finish(self) -> None:
        self.text += self._decoder.decode(b"", final=True)
