"""Trace files: a turn's event stream as JSON lines, so it can be replayed with no model.

The first line is a header (`type: "trace"`) with the models and settings; every following
line is one event exactly as `Event.to_json()` wrote it. Round events carry `t_s` (seconds from
the start of the turn), which is all a replay needs to keep the original pace.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, fields, is_dataclass, replace
from enum import Enum
from pathlib import Path
from typing import IO, Any

from specchat.engine.drafters import NO_DRAFT
from specchat.engine.events import (
    ContextEvent,
    Event,
    RoundEvent,
    TokenEvent,
    TurnCounts,
    TurnDiagnostics,
    TurnEvent,
)
from specchat.engine.stats import TurnStats
from specchat.errors import SpecchatError
from specchat.render import JsonRenderer
from specchat.resources import resource_dir

VERSION = 2
"""2: a turn carries counts and its rates are derived on reading (1: its rates as written,
its counts rebuilt from its rounds on reading)."""
_TYPES: dict[str, type] = {"token": TokenEvent, "round": RoundEvent, "turn": TurnEvent,
                           "context": ContextEvent}


@dataclass(frozen=True)
class Trace:
    meta: dict[str, Any]
    events: list[Event]

    @property
    def prompt(self) -> str:
        return str(self.meta.get("prompt", ""))


class TraceWriter(JsonRenderer):
    """An event sink that writes a trace file as the turn streams: a header line, then the
    event stream as `ask --json` writes it."""

    def __init__(self, stream: IO[str], meta: dict[str, Any]) -> None:
        super().__init__(stream)
        stream.write(json.dumps({"type": "trace", "version": VERSION, **meta}) + "\n")


def lane_label(meta: dict[str, Any]) -> str:
    """How a race names a recorded turn: target only, or the drafter and its settings."""
    draft = str(meta.get("draft", "?"))
    if draft == NO_DRAFT:
        return "target only"
    settings = meta.get("settings", {})
    how = "adaptive k<=" if settings.get("policy") == "adaptive" else "k="
    return f"speculative: {draft}, {how}{settings.get('k', '?')}"


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type a field's annotation names (int counts as float)."""
    if isinstance(hint, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if typing.get_origin(hint) is dict:  # a server's timings: names to numbers
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def event_from_json(data: dict[str, Any]) -> Event:
    """An event as `to_json` wrote it; ValueError names a field that is missing or wrong."""
    if not isinstance(data, dict) or data.get("type") not in _TYPES:
        raise ValueError(f"not an event: {str(data)[:60]}")
    cls = _TYPES[data["type"]]
    if cls is not TurnEvent:
        return cls(**_read(cls, data))
    if "decode_tokens" not in data:  # version 1: counts from its rounds
        data = data | {"decode_tokens": -1}
    return TurnEvent(**_read(TurnEvent, data), counts=TurnCounts(**_read(TurnCounts, data)),
                     diagnostics=TurnDiagnostics(**_read(TurnDiagnostics, data)))


def _read(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` a flat JSON event holds, each checked against its annotation (its
    nested groups left to the caller)."""
    hints = typing.get_type_hints(cls)
    kwargs = {f.name: data[f.name] for f in fields(cls)
              if f.init and f.name in data and not is_dataclass(hints[f.name])}
    for name, value in kwargs.items():
        hint = hints[name]
        if isinstance(hint, type) and issubclass(hint, Enum):  # TokenKind, StopReason
            try:
                kwargs[name] = hint(value)
            except ValueError:
                raise ValueError(f"{data['type']} event: {name} = {str(value)[:30]} is not one "
                                 f"of {', '.join(map(repr, hint))}") from None
        elif not _fits(value, hint):
            raise ValueError(f"{data['type']} event: {name} = {str(value)[:30]} has the wrong type")
    return kwargs


def with_counts(events: list[Event]) -> list[Event]:
    """The events with each version-1 turn's counts rebuilt from the rounds before it (its
    `decode_tokens` read as -1: not written)."""
    out: list[Event] = []
    stats = TurnStats()
    for event in events:
        if isinstance(event, RoundEvent):
            stats.add_round(event)
        elif isinstance(event, TurnEvent):
            if event.counts.decode_tokens < 0:
                event = replace(event, counts=replace(event.counts, **stats.counts()))
            stats = TurnStats()
        out.append(event)
    return out


def shipped_traces() -> list[Path]:
    """The traces recorded on the default pair that come with specchat."""
    return sorted(resource_dir("traces").glob("*.jsonl"))


def read_trace(path: str | Path) -> Trace:
    """A trace file, or the name of a shipped one (`code-0.5b-draft-k3`)."""
    path = Path(path)
    if not path.exists() and path.parent == Path("."):
        shipped = {p.stem: p for p in shipped_traces()}
        path = shipped.get(path.name.removesuffix(".jsonl"), path)
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        if not lines or not isinstance(lines[0], dict) or lines[0].get("type") != "trace":
            raise ValueError("no trace header on the first line")
        if not isinstance(lines[0].get("settings", {}), dict):
            raise ValueError("the header's settings are not a table")
        return Trace(lines[0], with_counts([event_from_json(d) for d in lines[1:]]))
    except FileNotFoundError:
        raise SpecchatError(f"trace file not found: {path}") from None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise SpecchatError(f"not a specchat trace: {path} ({reason})") from None


@dataclass
class Lane:
    """One recorded stream: a label and its events, grouped into rounds at their times."""

    label: str
    events: list[Event]

    def rounds(self) -> list[tuple[float, list[Event]]]:
        """(time the round's tokens appear, the round's events); the turn summary comes with
        the last round."""
        out: list[tuple[float, list[Event]]] = []
        batch: list[Event] = []
        for event in self.events:
            batch.append(event)
            if isinstance(event, RoundEvent):
                out.append((event.t_s, batch))
                batch = []
        if batch and out:
            out[-1][1].extend(batch)
        return out
