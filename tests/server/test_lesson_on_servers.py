"""The lesson on a room's llama-servers (what `specchat room --lesson` gives every tab): the
steps that need only verdicts and rates run on the servers, the target alone beside the
speculating one; the steps that show p and q say the servers send none and show the traces."""

from __future__ import annotations

from rich.style import Style
from support.models import GREEDY

from specchat.engine.events import TokenKind, TurnEvent
from specchat.lesson.demos import run_demo
from specchat.lesson.recordings import ServerRecordings
from specchat.lesson.script import default_path, load_lesson
from specchat.server.session import ServerSession

STYLES = {kind: Style() for kind in TokenKind}


def test_a_room_s_servers_make_the_rates_and_the_shipped_traces_the_probabilities(
        spec_server, plain_server):
    from specchat.lesson.demos import DEMOS

    lesson = load_lesson(default_path(), frozenset(DEMOS))
    session = ServerSession.connect(spec_server.url, None, GREEDY)
    recordings = ServerRecordings(session, plain_server.url, lesson.prompts, max_tokens=24)
    live = recordings.recording("code")
    assert "generated now on the room's servers" in live.source and not live.probabilities
    plain, spec = live.turns
    assert isinstance(plain, TurnEvent) and plain.counts.n_drafted == 0 and spec.counts.n_drafted > 0
    for name in ("target_step", "acceptance", "latency"):
        assert all("room's servers" in s for s in run_demo(name, recordings, STYLES).sources)
    servers, edit = run_demo("prose_vs_code", recordings, STYLES).sources  # code and prose
    assert "room's servers" in servers
    assert "the room's server drafts with" in edit  # n-gram lookup: the shipped trace
    for name in ("draft", "verify", "cache"):
        (source,) = run_demo(name, recordings, STYLES).sources
        assert source.startswith("shipped traces") and "a llama-server sends no p or q" in source
    (source,) = run_demo("ngram", recordings, STYLES).sources
    assert "drafts with" in source  # the room's server has a draft model, not n-gram lookup
