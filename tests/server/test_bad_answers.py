"""A llama-server that answers badly never crashes specchat: every answer of every endpoint the
client reads, and every stream chunk, either works or ends the reply with one line naming the
server (ServerError). Fuzzed with hypothesis (JSON bodies and server-sent-event streams served
by a real local HTTP server to the real client), plus the named cases through `specchat ask`,
and the app going on after a bad reply."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.answering_server import Answer, AnsweringServer, as_json, good_answers, good_reply, sse
from support.models import GREEDY
from support.pilot import SIZE, run_async, until
from support.processes import specchat

from specchat.engine.events import TurnEvent
from specchat.engine.loop import GenerationSettings
from specchat.render import JsonRenderer
from specchat.server.client import ServerClient, ServerError
from specchat.server.session import ServerSession
from specchat.wording import stats_line

EXAMPLES = 300


@pytest.fixture(scope="module")
def server():
    served = AnsweringServer()
    yield served
    served.stop()


def a_turn(url: str, between_tokens_s: float = 5.0) -> list:
    session = ServerSession(ServerClient(url, timeout_s=5.0, between_tokens_s=between_tokens_s),
                            GREEDY)
    events = list(session.turn("hi", GenerationSettings(max_tokens=8, baseline_steps=0)))
    session.client.close()
    return events


def either_works_or_names_the_server(url: str) -> str:
    """'ok' with the turn's events shown as every front end shows them, or the ServerError."""
    try:
        events = a_turn(url)
    except ServerError as exc:
        assert url in str(exc) and "\n" not in str(exc)
        return str(exc).split(" sent ")[-1][:24] if " sent " in str(exc) else "error"
    turn = events[-1]
    assert isinstance(turn, TurnEvent)
    stats_line(turn)
    JsonRenderer(open("/dev/null", "w"))(turn)
    return "ok"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)


def shaped(good: dict, values=JSON) -> st.SearchStrategy:
    """A body with the good answer's keys (each kept, left out or given any JSON value)."""
    return st.fixed_dictionaries({}, optional={k: st.just(v) | values for k, v in good.items()})


MODELS = st.one_of(JSON, st.fixed_dictionaries({}, optional={"data": JSON | st.lists(
    shaped({"id": "m.gguf", "meta": {"n_ctx": 512}}), max_size=2)}))
SLOTS = JSON | st.lists(shaped({"speculative": True, "params": {"speculative.types": "x"}}),
                        max_size=2)
CHUNK = shaped({"content": "a", "tokens": [5], "tokens_predicted": 1, "stop": True,
                "stop_type": "limit"}) | st.builds(
    lambda c, t: {**c, "timings": t},
    shaped({"content": "a", "tokens": [5], "tokens_predicted": 1}),
    JSON | shaped({"draft_n": 1, "draft_n_accepted": 1, "predicted_per_second": 2.0},
                  st.integers(-3, 5) | JSON))
LINE = CHUNK | st.binary(max_size=20) | JSON


def body(value) -> Answer:
    return Answer(value) if isinstance(value, bytes) else as_json(value)


FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(models=MODELS, slots=SLOTS, template=shaped({"prompt": "<p>"}) | st.binary(max_size=8),
       tokens=shaped({"tokens": [1, 2]}) | JSON)
def test_any_answer_to_the_small_requests_works_or_names_the_server(server, models, slots,
                                                                     template, tokens):
    server.answers = {**good_answers(), "/v1/models": body(models), "/slots": body(slots),
                      "/apply-template": body(template), "/tokenize": body(tokens)}
    event(either_works_or_names_the_server(server.url))


@FUZZ
@given(stream=st.lists(LINE, max_size=6), done=st.booleans())
def test_any_stream_works_or_ends_the_reply_naming_the_server(server, stream, done):
    server.answers = {**good_answers(), "/completion": Answer(sse(*stream, done=done), 200,
                                                              "text/event-stream")}
    event(either_works_or_names_the_server(server.url))


def test_a_good_server_gives_a_reply_on_one_kept_connection(server):
    server.answers = good_answers()
    before = server.connections
    events = a_turn(server.url)
    turn = events[-1]
    assert isinstance(turn, TurnEvent) and turn.text == "hi there" and turn.counts.n_accepted == 1
    assert turn.diagnostics.server["predicted_per_second"] == 9.5
    # /v1/models, /slots, /apply-template and /tokenize on one connection, the stream on its own
    assert server.connections - before == 2


BAD = {  # what the server sends -> what the one line says
    "an HTML error page from a proxy": (
        {"/v1/models": Answer(b"<html><body><h1>502 Bad Gateway</h1>\n</body></html>", 502,
                              "text/html")}, "answered /v1/models with 502"),
    "/v1/models as a list": ({"/v1/models": as_json([{"id": "x"}])},
                             "sent a JSON list where an object belongs for /v1/models"),
    "/apply-template without a prompt": ({"/apply-template": as_json({"text": "x"})},
                                         "sent no prompt text for /apply-template"),
    "/tokenize with words": ({"/tokenize": as_json({"tokens": ["a", "b"]})},
                             "sent no list of token ids for /tokenize"),
    "a stream chunk that is not JSON": (
        {"/completion": Answer(sse(b"data: {oops"), 200, "text/event-stream")},
        "sent a stream chunk that is not JSON"),
    "timings as a number": (
        {"/completion": Answer(sse({"content": "a", "tokens_predicted": 1, "timings": 3}),
                               200, "text/event-stream")}, "timings as a JSON number"),
    "a stream cut before its stop chunk": (
        {"/completion": Answer(good_reply().rsplit(b"data:", 1)[0], 200, "text/event-stream")},
        "closed the connection before its last chunk"),
    "counters running backwards": (
        {"/completion": Answer(sse({"content": "a", "tokens_predicted": 2},
                                   {"content": "b", "tokens_predicted": 1}),
                               200, "text/event-stream")}, "counters that run backwards"),
    "text without token counts": (
        {"/completion": Answer(sse({"content": "hello"}, {"content": " world", "stop": True}),
                               200, "text/event-stream")}, "text without the token count"),
    "wrong types in a chunk": (
        {"/completion": Answer(sse({"content": 7, "tokens_predicted": "1"}), 200,
                               "text/event-stream")}, "a chunk with fields of the wrong type"),
    "bytes that are not UTF-8": (
        {"/completion": Answer(sse(b"data: \xff\xfe\x00{"), 200, "text/event-stream")},
        "sent a stream chunk that is not JSON"),
    "a 10 MB line": (
        {"/completion": Answer(b"data: " + b"a" * (10 << 20) + b"\n\n", 200,
                               "text/event-stream")}, "a stream line over 4 MiB"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_a_bad_answer_is_one_line_in_ask(server, tmp_path, case):
    answers, says = BAD[case]
    server.answers = {**good_answers(), **answers}
    done = specchat("ask", "hi", "--server", server.url, "--max-tokens", "8", tmp_path=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    *where, error = done.stderr.strip().splitlines()  # the line saying where, once connected
    assert error.startswith("specchat: error: ") and says in error and server.url in error
    assert all(line.startswith("specchat: llama-server ") for line in where) and len(where) <= 1


def test_a_server_that_stalls_mid_reply_is_named_after_the_between_tokens_limit(server):
    server.answers = {**good_answers(),
                      "/completion": Answer(good_reply(), 200, "text/event-stream", pause_s=3.0)}
    with pytest.raises(ServerError, match="stopped answering mid-reply .no answer in time"):
        a_turn(server.url, between_tokens_s=0.5)
    assert a_turn(server.url, between_tokens_s=5.0)[-1].text == "hi there"  # a pause it allows


def test_the_app_says_what_a_bad_reply_was_and_the_conversation_goes_on(server, tiny, tmp_path):
    from support.pilot import make_app

    from specchat.ui.widgets.prompt_input import PromptInput

    server.answers = {**good_answers(), "/completion": Answer(sse(b"data: {oops"), 200,
                                                             "text/event-stream")}
    app = make_app(tiny, tmp_path)
    app.settings.models.server = server.url

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            screen = app.chat_screen
            await until(pilot, lambda: screen.chat is not None)
            screen.query_one(PromptInput).text = "first"
            await pilot.press("enter")
            await until(pilot, lambda: "not JSON" in screen.view.status_text)
            assert screen.query_one(PromptInput).text == "first"  # back in the box
            server.answers = good_answers()
            await pilot.press("enter")
            await until(pilot, lambda: len(screen.chat.session.conversation.messages) == 2)
            assert screen.chat.session.conversation.messages[1] == ("assistant", "hi there")
            assert json.dumps(screen.chat.session.conversation.messages)

    run_async(scenario)
