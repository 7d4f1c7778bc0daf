"""`specchat lesson`: the guided lesson in the app (or as slides with --export), its
demonstrations on the pair loaded here, a llama-server's (--server), or the shipped traces
(--traces, or wherever no model can load: the light client install)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specchat import settings as settings_schema
from specchat.lesson.script import Lesson
from specchat.settings import Settings

if TYPE_CHECKING:
    from specchat.lesson.recordings import Recordings

TOKENS = 64
"""Tokens of each reply a live demonstration generates: enough to show a round's shape, short
enough for a room to wait for (the twelve steps' live runs took about a minute on two cores)."""


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    lesson = sub.add_parser(
        "lesson", help="a guided lesson on speculative decoding, each step a live demonstration",
        description="Speculative decoding in steps: what to say, a demonstration on the loaded "
                    "pair (or a llama-server's with --server, or the shipped traces with "
                    "--traces or when no model can load), and a question for the room; some "
                    "steps are exercises the room runs together. Keys: Right/n/Space next, "
                    "Left/b back, r run again, a the presenter's answer and notes, e the "
                    "exercise line, F8 this step as a slide, Esc the chat (F9 comes back); in a "
                    "room (`specchat room --lesson`) f follows the presenter again, and t takes "
                    "the lead on a second presenter's tab.")
    lesson.add_argument("--file", type=Path, metavar="LESSON.toml",
                        help="a lesson of your own (edit or translate the shipped one: --list "
                             "says where it is)")
    lesson.add_argument("--traces", action="store_true",
                        help="run the demonstrations on the shipped traces, loading no model")
    lesson.add_argument("--tokens", type=int, default=TOKENS,
                        help="tokens of each live demonstration's replies (default: "
                             "%(default)s)")
    lesson.add_argument("--start", type=int, default=1, metavar="STEP",
                        help="the step to open at (default: 1)")
    lesson.add_argument("--list", action="store_true",
                        help="print the steps, the demonstrations, and the lesson file")
    lesson.add_argument("--export", type=Path, metavar="DIR",
                        help="write every step as SVG and HTML slides to DIR instead (and the "
                             "presenter's notes, presenter-notes.md)")
    lesson.add_argument("--rehearse", action="store_true",
                        help="run every step's demonstration once and print each step's time "
                             "and any figure whose prediction and measurement disagree (exit "
                             "status 1 where a demonstration failed)")
    lesson.add_argument("--theme", default="specchat-projector",
                        help="the theme of --export's slides (default: %(default)s)")
    settings_schema.add_arguments(lesson, defaults)
    lesson.set_defaults(func=run)


def why_no_models(settings: Settings) -> str | None:
    """Why the pair cannot load here (no llama.cpp, a model not installed), or None."""
    from specchat.catalog.catalog import resolve_model
    from specchat.choices import DraftChoice
    from specchat.errors import SpecchatError
    from specchat.loading import require_llama_cpp

    if settings.models.server:
        return None
    try:
        require_llama_cpp()
        resolve_model(settings.models.target, "target")
        if (model := DraftChoice.parse(settings.models.draft).model) is not None:
            resolve_model(model, "draft")
    except SpecchatError as exc:
        return str(exc).splitlines()[0]
    return None


def run(args: argparse.Namespace) -> int:
    """The lesson in the app, or offline: --list, --export, --rehearse."""
    from specchat.errors import SpecchatError
    from specchat.lesson.demos import DEMOS
    from specchat.lesson.exercises import EXERCISES
    from specchat.lesson.script import load_lesson

    lesson = load_lesson(args.file, frozenset(DEMOS))
    if args.list:
        print(f"{lesson.title} ({lesson.path})")
        for n, step in enumerate(lesson.steps, 1):
            what = f"exercise: {step.exercise}" if step.exercise else f"demo: {step.demo}"
            print(f"{n:>3}. {step.title:<48} {what:<24} {step.minutes:g} min")
        print("demonstrations: " + ", ".join(DEMOS))
        print("exercises: " + ", ".join(EXERCISES))
        return 0
    if not 1 <= args.start <= len(lesson.steps):
        raise SpecchatError(f"--start {args.start}: the lesson has steps 1-{len(lesson.steps)}")
    if args.tokens < 8:
        raise SpecchatError("--tokens: at least 8 (a demonstration needs a few rounds)")
    settings = settings_schema.from_args(args)
    traces = args.traces
    if not traces and (why := why_no_models(settings)):
        print(f"specchat lesson: on the shipped traces ({why})", file=sys.stderr)
        traces = True
    if args.export or args.rehearse:
        return _offline(args, lesson, settings, traces)
    from specchat.ui.app import SpecchatApp
    from specchat.ui.launch import Launch, LessonLaunch

    SpecchatApp(settings, Launch(lesson=LessonLaunch(lesson, traces, args.tokens,
                                                     args.start - 1))).run()
    return 0


def _offline(args: argparse.Namespace, lesson: Lesson, settings: Settings, traces: bool) -> int:
    """--export or --rehearse: every step's demonstration, outside the app."""
    from specchat.keeper import ModelKeeper
    from specchat.lesson.recordings import LiveRecordings, TraceRecordings
    from specchat.native import model_thread

    recordings: Recordings
    if traces:
        recordings = TraceRecordings()
    elif settings.models.server:
        from specchat.lesson.recordings import ServerRecordings
        from specchat.server.session import ServerSession

        session = ServerSession.connect(settings.models.server, None,
                                        settings.sampling.params())
        recordings = ServerRecordings(session, settings.models.baseline_server, lesson.prompts,
                                      args.tokens)
    else:
        model_thread.adopt()
        keeper = ModelKeeper(settings)
        engine = keeper.load()
        keeper.warm_up(engine)
        recordings = LiveRecordings(keeper, engine, lesson.prompts, args.tokens)
    print(f"running {len(lesson.steps)} demonstrations on {recordings.where}…", file=sys.stderr)
    if args.rehearse:
        return _rehearse(lesson, recordings)
    from specchat.ui.export import export_lesson

    files = export_lesson(lesson, recordings, args.export, args.theme)
    print(f"wrote {len(files)} files to {args.export.resolve()}")
    return 0


def _rehearse(lesson: Lesson, recordings: Recordings) -> int:
    from specchat.lesson.rehearsal import rehearse, report_line

    steps = []
    for rehearsed in rehearse(lesson, recordings):
        print(report_line(rehearsed), flush=True)
        steps.append(rehearsed)
    failed = [s for s in steps if s.error]
    parting = [s for s in steps if s.disagreeing]
    made = sum(s.seconds for s in steps)
    planned = sum(s.minutes for s in steps)
    print(f"demonstrations made in {made:.0f} s; the lesson gives its steps {planned:g} min; "
          + (f"{len(failed)} demonstrations failed; " if failed else "")
          + (f"{len(parting)} steps show a prediction outside its measurement's interval"
             if parting else "every predicted figure agrees with its measurement"))
    return 1 if failed else 0
