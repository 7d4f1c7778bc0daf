"""`specchat serve -- APP ARGS`: the app in web browsers, each tab its own specchat."""

from __future__ import annotations

import argparse

from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    web = sub.add_parser(
        "serve", help="the app in web browsers, each tab its own specchat (a workshop room)",
        description="Serve specchat to web browsers: each tab runs its own `specchat APP ARGS`, "
                    "e.g. `specchat serve --expose -- --server http://127.0.0.1:8080` for a room "
                    "sharing one llama-server, or `-- replay code-0.5b-draft-k3` with no models.")
    web.add_argument("--host", help="address to listen on (default: 127.0.0.1, or every "
                                    "address with --expose)")
    web.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    web.add_argument("--expose", action="store_true",
                     help="listen beyond this machine (no authentication: read the warning it "
                          "prints)")
    web.add_argument("--open", action="store_true",
                     help="with --expose: no access code (anyone who reaches the port gets in)")
    web.add_argument("--max-sessions", type=int, default=8, metavar="N",
                     help="tabs served at once; one more gets a page saying the room is full "
                          "(default: %(default)s)")
    web.add_argument("app_args", nargs=argparse.REMAINDER, metavar="-- APP ARGS",
                     help="what each tab runs, as after `specchat` (default: the app)")
    web.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The app in web browsers: each tab runs `specchat APP ARGS` (the arguments after --)."""
    from specchat.web.tab_server import tab_server

    app_args = args.app_args[1:] if args.app_args[:1] == ["--"] else args.app_args
    tab_server(app_args, args.host, args.port, args.expose, args.max_sessions, args.open).serve()
    return 0
