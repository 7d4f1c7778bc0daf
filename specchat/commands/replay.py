"""`specchat replay TRACE...`: a recorded trace in the app, no model needed; two or more race
side by side; `--export` writes slides instead."""

from __future__ import annotations

import argparse
from pathlib import Path

from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    replay = sub.add_parser(
        "replay", help="play a recorded trace in the app, no model needed; two or more race "
                       "side by side")
    replay.add_argument("files", nargs="*", metavar="TRACE",
                        help="trace files or names of shipped traces (see --list)")
    replay.add_argument("--list", action="store_true", help="list the shipped traces")
    replay.add_argument("--step", action="store_true",
                        help="step-through: each round waits for Space")
    replay.add_argument("--speed", type=float, default=1.0, help="2 = twice as fast")
    replay.add_argument("--export", type=_formats, metavar="svg|html|svg,html",
                        help="write slides instead of playing: each turn (coloured tokens, "
                             "legend, stats), and the race of two or more traces (SVG)")
    replay.add_argument("--out", type=Path, default=Path("specchat-slides"), metavar="DIR",
                        help="where --export writes (default: %(default)s)")
    replay.add_argument("--theme", default="specchat-projector",
                        help="the theme of the slides (default: %(default)s, high contrast)")
    replay.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specchat.trace import read_trace, shipped_traces
    from specchat.ui.app import SpecchatApp
    from specchat.ui.launch import Launch

    if args.list or not args.files:
        for path in shipped_traces():
            trace = read_trace(path)
            print(f"{path.stem:<28} {trace.meta.get('draft', '?'):<36} {trace.prompt[:60]!r}")
        return 0
    traces = [read_trace(f) for f in args.files]
    if args.export:
        from specchat.ui.export import export

        files = export([(Path(f).name.removesuffix(".jsonl"), t) for f, t in zip(args.files, traces)],
                       args.export, args.out, args.theme)
        print(f"wrote {len(files)} files to {args.out.resolve()}: "
              + ", ".join(f.name for f in files))
        return 0
    if len(traces) == 1:
        launch = Launch(replay=traces[0], replay_speed=args.speed, step=args.step)
    else:
        launch = Launch(race=traces, replay_speed=args.speed)
    SpecchatApp(launch=launch).run()
    return 0


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",")))
    if not formats or not set(formats) <= {"svg", "html"}:
        raise argparse.ArgumentTypeError(f"{text!r}: svg, html or svg,html")
    return formats
