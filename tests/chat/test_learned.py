"""What the policy learned outlives the process, beside the history it goes with: a one-off
`specchat ask` and a new chat start from it; a file that cannot be read or written never stops
a reply."""

from __future__ import annotations

import json

from support.models import GREEDY
from support.processes import history_path, specchat

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.chat.history import HistoryStore
from specchat.chat.learned import beside
from specchat.chat.session import ChatSession
from specchat.chat.state import ChatState
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy.memory import remembered


def chat_on(tiny, history: HistoryStore, target_file=None) -> ChatState:
    target = LlamaCppBackend(target_file or tiny.target, n_ctx=512, n_threads=1)
    return ChatState(ChatSession(SpeculativeEngine(target, NgramDrafter(), GREEDY)), history)


def reply(chat: ChatState, text: str) -> None:
    for event in chat.turn(text, GenerationSettings(max_tokens=24)):
        chat.record(event)


def test_each_ask_starts_from_what_the_asks_before_it_learned(tiny, tmp_path):
    memory = beside(history_path(tmp_path))
    for n in (1, 2):
        proc = specchat("ask", "one two three one two three", "--target", str(tiny.target),
                        "--draft", "ngram", "--max-tokens", "24", "--json", tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        [kept] = json.loads(memory.read_text())[str(tiny.target)]["sources"].values()
        observed = sum(n for rates in kept["by_target_conf"].values() for _, n in rates)
        if n == 1:
            first = observed
    assert observed > first  # the second ask added to what the first one saw


def test_a_new_chat_starts_from_the_memory_and_a_reply_keeps_what_it_learned(tiny, tmp_path):
    history = HistoryStore(tmp_path / "history.sqlite3")
    earlier = chat_on(tiny, history)
    reply(earlier, "one two three one two three one two three")
    memory = beside(history.path)
    kept = json.loads(memory.read_text())
    assert kept[str(tiny.target)] == remembered(earlier.engine.policy.costs)

    later = chat_on(tiny, HistoryStore(history.path))
    [(source, known)] = kept[str(tiny.target)]["sources"].items()
    assert source in later.engine.policy.costs.acceptance.by_position
    assert remembered(later.engine.policy.costs)["sources"][source][
        "by_target_conf"] == known["by_target_conf"]


def test_a_damaged_memory_starts_from_the_priors_and_the_next_reply_writes_it_again(tiny, tmp_path):
    history = HistoryStore(tmp_path / "history.sqlite3")
    memory = beside(history.path)
    memory.write_text("{not json")
    chat = chat_on(tiny, history)
    assert not chat.engine.policy.costs.acceptance.by_position
    reply(chat, "one two three one two three")
    assert str(tiny.target) in json.loads(memory.read_text())


def test_a_memory_that_cannot_be_read_or_written_only_loses_the_memory(tiny, tmp_path):
    """A folder where the memory file should be (root writes any file, so a read-only folder
    would not stop this test's user)."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    beside(history.path).mkdir()
    chat = chat_on(tiny, history)
    reply(chat, "one two three one two three")
    assert len(chat.turns) == 1 and beside(history.path).is_dir()
    assert not list(tmp_path.glob("*.part"))


def test_a_new_chat_knows_how_long_this_targets_replies_ran(tiny, tmp_path):
    """A draft model's catch-up is earned back over as many tokens as replies run
    (`ReplyLengths`): a new chat starts with the lengths of the last replies on its target
    (the one just written among them), not those of another target."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    earlier = chat_on(tiny, history)
    for text in ("one two three one two three", "four five six four five six"):
        reply(earlier, text)
    written = [len(turn.token_ids) for turn in earlier.turns]
    assert list(chat_on(tiny, HistoryStore(history.path)).engine.policy.costs.lengths.recent) \
        == written
    other = chat_on(tiny, HistoryStore(history.path), target_file=tiny.draft)
    assert not other.engine.policy.costs.lengths.recent
