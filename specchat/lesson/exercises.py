"""The room's exercises: each attendee runs the target alone against speculation with settings
and a prompt of their own, and the run's numbers (never its text) go to the room, where the
presenter's tab draws every run on the formula's curve, with a board of the best.

An exercise step names one of EXERCISES in the lesson file. A run is a RoomRun: small, typed,
checked on the way in (the room refuses anything else in one line)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from specchat.choices import DraftChoice
from specchat.costs import Costs, break_even, speedup
from specchat.errors import SpecchatError
from specchat.lesson import figures
from specchat.lesson.demos import Demo
from specchat.lesson.recordings import Recording, Recordings
from specchat.settings import POLICIES

KINDS = ("code", "chat", "edit", "other")
"""What an attendee says their prompt is (a run never carries the prompt's text)."""
K_RANGE = range(1, figures.K_MAX + 1)
DRAFTS = ("model", "ngram")
"""What a run drafts with: the loaded draft model, or n-gram lookup in the conversation."""


@dataclass(frozen=True)
class Exercise:
    title: str
    task: str
    settings: str
    """The settings the attendee starts from (they edit them)."""


EXERCISES = {
    "sweep_k": Exercise(
        "Sweep k", "Each of you one k from 1 to 8 (--k N), the same code prompt: where does "
                   "the gain stop growing?", "--k 4 --kind code"),
    "ngram_hunt": Exercise(
        "Hunt for n-gram wins and losses", "Find a prompt where the n-gram drafter wins, and "
                                           "one where it loses.", "--draft ngram --kind edit"),
    "break_even": Exercise(
        "Find the break-even", "Find prompts whose acceptance lands near this machine's "
                               "break-even: the curve's 1.00x line.", "--k 3 --kind chat"),
    "workload": Exercise(
        "A workload of 70% code and 30% chat", "Choose a drafter and a policy; run it on code "
                                               "and on chat prompts; the board weighs them 70/30.",
        "--policy adaptive --kind code"),
}


@dataclass(frozen=True)
class RunSettings:
    k: int = 3
    draft: str = "model"
    policy: str = "fixed"
    kind: str = "code"

    @property
    def draft_choice(self) -> DraftChoice | None:
        """The drafter this run loads beside the app's: n-gram lookup, or None for the app's
        own draft model."""
        return DraftChoice(ngram=True) if self.draft == DRAFTS[1] else None

    @classmethod
    def parse(cls, line: str) -> tuple[RunSettings, str]:
        """What the attendee typed: settings first (`--k 4 --draft ngram --policy adaptive
        --kind code`), then the prompt, as typed. A SpecchatError names what is wrong, in one
        line."""
        parser = argparse.ArgumentParser(prog="settings", add_help=False, exit_on_error=False)
        parser.add_argument("--k", type=int, default=cls.k)
        parser.add_argument("--draft", choices=DRAFTS, default=cls.draft)
        parser.add_argument("--policy", choices=POLICIES, default=cls.policy)
        parser.add_argument("--kind", choices=KINDS, default=cls.kind)
        words = line.split()
        flags = 0
        while flags < len(words) and words[flags].startswith("--"):
            flags += 2
        known = (f"--k N, --draft {'|'.join(DRAFTS)}, --policy {'|'.join(POLICIES)}, --kind "
                 f"{'|'.join(KINDS)}, then the prompt")
        try:
            args, rest = parser.parse_known_args(words[:flags])
        except (argparse.ArgumentError, ValueError) as exc:
            raise SpecchatError(f"settings: {exc} ({known})") from None
        if rest:
            raise SpecchatError(f"settings: {' '.join(rest)} is not one of them ({known})")
        if args.k not in K_RANGE:
            raise SpecchatError(f"settings: --k {args.k}: from 1 to {figures.K_MAX}")
        prompt = line.split(None, flags)[flags].strip() if len(words) > flags else ""
        if not prompt:
            raise SpecchatError("the prompt is missing: type it after the settings")
        return cls(args.k, args.draft, args.policy, args.kind), prompt


@dataclass(frozen=True)
class RoomRun:
    """One attendee's finished run, as the room keeps it."""

    k: int
    draft: str
    policy: str
    kind: str
    acceptance: float
    tokens_a_round: float
    speedup: float
    low: float
    high: float
    tab: int = 0
    """The room's number for the tab that ran it (the room sets it, never the tab)."""

    def to_json(self) -> dict[str, object]:
        """What a tab posts: every field but the tab's number, which the room sets."""
        data = asdict(self)
        del data["tab"]
        return data

    @classmethod
    def from_json_with_tab(cls, data: dict[str, object]) -> RoomRun:
        """A run as the room gives it back: checked as a post is, with the room's tab
        number."""
        if not isinstance(data, dict):
            return cls.from_json(data)
        tab = data.get("tab", 0)
        run = cls.from_json({k: v for k, v in data.items() if k != "tab"})
        return replace(run, tab=tab if type(tab) is int else 0)

    @classmethod
    def from_json(cls, data: object) -> RoomRun:
        """A run posted to the room; a SpecchatError says, in one line, why one is refused."""
        if not isinstance(data, dict):
            raise SpecchatError("a run is a JSON object")
        names = {f.name for f in fields(cls)} - {"tab"}
        if set(data) != names:
            raise SpecchatError(f"a run has exactly the fields {', '.join(sorted(names))}")
        run = cls(**{name: data[name] for name in names})
        if not (type(run.k) is int and run.k in K_RANGE and run.draft in DRAFTS
                and run.policy in POLICIES and run.kind in KINDS):
            raise SpecchatError("a run's k, draft, policy or kind is not one the room knows")
        numbers = (run.acceptance, run.tokens_a_round, run.speedup, run.low, run.high)
        if not all(type(x) in (int, float) and math.isfinite(x) for x in numbers):
            raise SpecchatError("a run's figures are finite numbers")
        if not (0 <= run.acceptance <= 1 and 1 <= run.tokens_a_round <= run.k + 1
                and 0 < run.low <= run.speedup <= run.high < 100):
            raise SpecchatError("a run's figures are out of their ranges")
        return run


def run_of(rec: Recording, settings: RunSettings) -> RoomRun:
    """The numbers of a finished race (a SpecchatError where it drafted nothing)."""
    accept = figures.acceptance_of(rec.speculative)
    measured = figures.race_speedup(rec)
    spec = rec.turns[1]
    if accept is None or measured is None or spec.counts.acceptance_rate is None:
        raise SpecchatError("this run drafted nothing: nothing to post")
    return RoomRun(settings.k, settings.draft, settings.policy, settings.kind,
                   spec.counts.acceptance_rate, accept.tokens_a_round.value, measured.value,
                   measured.low, measured.high)


WIDTH, HEIGHT = 56, 14
MARKS = "0123456789abcdefghijklmnopqrstuvwxyz"


def class_plot(runs: Sequence[RoomRun], costs: Costs, where: str, k: int = 3
               ) -> RenderableType:
    """The room's runs (each a mark: its tab's number) on the formula's curve: the speedup of
    a round drafting `k` at one acceptance for every position, on `costs`."""
    top = max([2.0, *(r.speedup for r in runs)])
    grid = [[" "] * WIDTH for _ in range(HEIGHT)]

    def cell(a: float, s: float) -> tuple[int, int]:
        x = min(WIDTH - 1, max(0, round(a * (WIDTH - 1))))
        y = min(HEIGHT - 1, max(0, round((1 - s / top) * (HEIGHT - 1))))
        return x, y
    one = cell(0, 1.0)[1]
    grid[one] = ["-"] * WIDTH
    for x in range(WIDTH):
        a = x / (WIDTH - 1)
        _, y = cell(a, speedup(costs, [min(a, 0.999)] * k, k))
        grid[y][x] = "·"
    for run in runs:
        x, y = cell(run.acceptance, run.speedup)
        grid[y][x] = MARKS[run.tab % len(MARKS)]
    labels = {0: f"{top:.1f}x", one: "1.0x", HEIGHT - 1: "0.0x"}
    lines = [Text(f"{labels.get(i, ''):>6}|{''.join(row)}") for i, row in enumerate(grid)]
    even = break_even(costs, k)
    left = "       0% acceptance (drafts standing)"
    axis = Text("      +" + "-" * WIDTH + "\n" + left + " " * (7 + WIDTH - len(left) - 4)
                + "100%")
    note = Text(f"the curve: a model draft's speedup at k={k} with one acceptance at every "
                f"position, on {where}: "
                + (f"break-even {even:.0%}" if even else "no acceptance breaks even here")
                + "; n-gram runs draft for free and sit above it")
    return Group(*lines, axis, note)


def board(runs: Sequence[RoomRun], best: int = 8, title: str = "the room's best runs") -> Table:
    """The best runs by speedup."""
    table = Table("tab", "k", "draft", "policy", "kind", "drafts standing", "tokens a round",
                  "speedup (95%)", box=None, title=title, title_justify="left")
    for run in sorted(runs, key=lambda r: -r.speedup)[:best]:
        table.add_row(str(run.tab), str(run.k), run.draft, run.policy, run.kind,
                      f"{run.acceptance:.0%}", f"{run.tokens_a_round:.2f}",
                      f"{run.speedup:.2f}x ({run.low:.2f}-{run.high:.2f})")
    return table


def workload(runs: Sequence[RoomRun]) -> list[str]:
    """Each setting's 70% code / 30% chat speedup, where the room ran it on both (the mean
    time a token weighed: 1 / (0.7 / code + 0.3 / chat))."""
    by: dict[tuple[int, str, str], dict[str, list[float]]] = {}
    for r in runs:
        by.setdefault((r.k, r.draft, r.policy), {}).setdefault(r.kind, []).append(r.speedup)
    out = []
    for (k, draft, policy), kinds in sorted(by.items()):
        if "code" in kinds and "chat" in kinds:
            code = sum(kinds["code"]) / len(kinds["code"])
            chat = sum(kinds["chat"]) / len(kinds["chat"])
            out.append(f"k={k} {draft} {policy}: {1 / (0.7 / code + 0.3 / chat):.2f}x on 70% "
                       f"code ({code:.2f}x) and 30% chat ({chat:.2f}x)")
    return out


def exercise_demo(exercise: Exercise, mine: Sequence[RoomRun], room: Sequence[RoomRun] | None,
                  costs: tuple[Costs, str] | None, note: str = "") -> Demo:
    """An exercise step: the task, this tab's runs, and (`room`: the presenter's tab, or a
    lone lesson's own runs) every run on the formula's curve with the board."""
    parts: list[RenderableType] = [Text(exercise.task, style="bold"), Text(
        "Type settings (--k 1-8, --draft model|ngram, --policy fixed|adaptive, --kind "
        f"{'|'.join(KINDS)}) and a prompt on the line below (e takes you there, Escape back); "
        "Enter races the target alone against them. Your numbers go to the room, never your "
        "text.")]
    if note:
        parts.append(Text(note, style="italic"))
    if mine and room is not mine:  # a lesson alone: its runs are the board below
        parts += [Text(), board(mine[-5:], best=5, title="your runs")]
    sources = ["your runs: generated here now, target alone then speculative, one after the "
               "other"]
    if room is not None:
        if costs is not None:
            parts += [Text(), class_plot(room, *costs)]
            sources.append(costs[1])
        else:
            parts += [Text(), Text("the curve comes once this machine's costs are timed (the "
                                   "lesson's code race and the verify curve)", style="italic")]
        parts += [Text(), board(room)]
        if exercise is EXERCISES["workload"]:
            parts += [Text(line) for line in workload(room)]
        sources.append(f"the room's runs: {len(room)}, posted by its tabs as they finished")
    return Demo(Group(*parts), tuple(sources))


def room_costs(recordings: Recordings) -> tuple[Costs, str] | None:
    """The costs the class plot's curve is drawn on: those of the lesson's race on code (the
    step on what a round costs), and where they come from; None where they cannot be had."""
    try:
        rec = recordings.recording("code")
        return (figures.race_costs(recordings.curve(), rec),
                f"the costs of the lesson's code race ({rec.source})")
    except (SpecchatError, ValueError):  # a timing with nothing to time, a short reply
        return None


def step_demo(exercise: str, recordings: Recordings) -> Demo:
    """An exercise step as a slide made outside the app: no runs yet, the curve drawn."""
    return exercise_demo(EXERCISES[exercise], [], [], room_costs(recordings))
