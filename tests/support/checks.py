"""The rules every engine must keep, as checks the tests of each backend call: greedy output
is the target's own, sampling follows the target's distribution (chi-square), long
conversations never dead-end."""

from __future__ import annotations

import os
from typing import NoReturn

import numpy as np
from hypothesis import strategies as st
from scipy.stats import chisquare

from specchat.chat.session import ChatSession, Conversation
from specchat.engine.backend import Backend
from specchat.engine.compare import batching_gap_drift, first_divergence
from specchat.engine.drafters import CombinedDrafter, ModelDrafter, NgramDrafter, NoDrafter
from specchat.engine.events import ContextEvent, TokenEvent, TokenKind, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.policy import TreeSettings
from specchat.engine.sampling import SamplingParams, sample
from specchat.engine.verify import Verdict
from support.models import GREEDY, RecordingBackend, prompt_ids, run

DIVERGENCES: list[str] = []
"""Each greedy divergence the end-to-end tests saw, printed at the end of the run."""


CALIBRATION_PROMPTS = ["hello world", "the cat sat on", "0123456789", "speculative decoding"]

NEAR_TIE_CEILING = 0.01
"""The largest top-2 logit gap the greedy oracles of the tiny models accept as a near-tie,
whatever the backend under test measures of itself: a bug in a batched kernel must not raise
the threshold that then excuses it. llama.cpp's batch-dependent rounding moved the gap by at
most 0.0010 on the tiny target and 0.0005 on the tiny draft (F32 weights, which llama.cpp does
not repack; their Q4_0 copies: 0), over six prompts and batches of 2-8
(`python -m benchmarks.batching_drift`, docs/divergence.md): the ceiling is ten times the
largest. The default pair has its own (tests/e2e)."""


def calibrated_near_tie(target, floor: float) -> float:
    """4x the largest change of the top-2 logit gap that batching causes on the calibration
    prompts' target-only continuations (at least `floor`), which must stay under
    NEAR_TIE_CEILING: calibration can only lower the ceiling, never raise it."""
    worst = 0.0
    for text in CALIBRATION_PROMPTS:
        ids = prompt_ids(target, text)
        _, turn = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=24)
        worst = max(worst, batching_gap_drift(target, ids, turn.token_ids))
    assert 4 * worst <= NEAR_TIE_CEILING, (
        f"batching moved {target.name}'s top-2 gap by {worst:.4f}: four times that is above the "
        f"near-tie ceiling {NEAR_TIE_CEILING} (a batched kernel that rounds too far?)")
    return max(4 * worst, floor)


def make_drafter(kind: str, draft_backend):
    model = ModelDrafter(draft_backend, GREEDY, np.random.default_rng(0))
    return {"model": model, "ngram": NgramDrafter(2), "combined":
            CombinedDrafter(NgramDrafter(2, 6), model)}[kind]


GREEDY_CASES = {
    "text": st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x24F), min_size=1,
                    max_size=30),
    "k": st.integers(1, 6),
    "drafter": st.sampled_from(["model", "ngram", "combined"]),
    "adaptive": st.booleans(),
}


PADDING_SHAPE = (1.0, 1.6, 2.1, 1.4, 2.1, 2.6, 3.0, 2.4, 3.0, 3.4, 3.8, 3.3)
"""A verify curve, in steps, where 4 and 8 tokens cost less than 2-3 and 5-7 (a Q4_0 layout on
x86 after specchat's patch, docs/lab/): given as known, it makes the engine pad."""


def check_greedy_rule(target: RecordingBackend, drafter, ids: list[int], k: int, adaptive: bool,
                      near_tie: float, padded: bool = False,
                      tree: TreeSettings | None = None) -> list:
    """The engine's greedy rule on any backend: every token is the argmax of the logits the
    engine computed for it in this run, and the reply equals target-only's, or parts from it
    first at a near-tie of the target-only run. `padded`: with a known curve that pads verify
    batches; `tree`: drafting trees. Returns the speculative run's events."""
    base_rows = target.record()
    plain_events, _ = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=32)
    spec = SpeculativeEngine(target, drafter, GREEDY,
                             DraftSettings(k=k, adaptive=adaptive, tree=tree))
    if padded:
        spec.policy.costs.machine.shape = PADDING_SHAPE
    spec_rows = target.record()
    events, turn = run(spec, ids, max_tokens=32)
    for event in events:
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            assert event.id == int(spec_rows[len(ids) + event.position].argmax())
    assert_same_up_to_a_near_tie(plain_events, turn, near_tie, base_rows)
    return events


def assert_same_up_to_a_near_tie(plain_events: list, turn: TurnEvent, near_tie: float,
                                 base_rows: dict[int, np.ndarray] | None = None) -> None:
    """The reply of `turn` equals the target-only run's (`plain_events`) token for token, with
    the same length and stop reason; or the two first part at a position where the target-only
    run's top-2 logit gap is at most `near_tie` (never above NEAR_TIE_CEILING). Where one reply
    ended and the other went on, the gap is read from the target-only run's row at that
    position (`base_rows`, by absolute position, as RecordingBackend records them)."""
    base: TurnEvent = plain_events[-1]
    near_tie = min(near_tie, NEAR_TIE_CEILING)
    at = first_divergence(base.token_ids, turn.token_ids)
    if at is None:
        if base.token_ids == turn.token_ids:
            assert turn.stop_reason == base.stop_reason, (
                f"the same tokens, but stopped for {turn.stop_reason!r} where target-only "
                f"stopped for {base.stop_reason!r}")
            return
        at = min(base.n_tokens, turn.n_tokens)  # one ended here, the other went on
    gap = next((e.logit_gap for e in plain_events
                if isinstance(e, TokenEvent) and e.position == at), None)
    if gap is None and base_rows is not None:
        row = base_rows.get(len(base.prompt_token_ids) + at)
        gap = None if row is None else float(np.diff(np.sort(row)[-2:])[0])
    assert gap is not None, (
        f"the replies part at {at} ({base.n_tokens} tokens target-only, {turn.n_tokens} here) "
        "where the target-only run has no row to judge a near-tie by")
    assert gap <= near_tie, (f"the replies part at {at} where target-only's top-2 gap is {gap:.4f},"
                             f" above the near-tie threshold {near_tie:.4f}")


def target_only_rows(target: Backend, turn: TurnEvent) -> dict[int, np.ndarray]:
    """The rows a target-only run of `turn` computed (its prompt in one batch, then one token
    at a time), by absolute position as RecordingBackend records them: the near-tie judge for
    a turn whose token events are gone (the app keeps only the finished turn)."""
    recording = RecordingBackend(target)
    rows = recording.record()
    recording.truncate(0)
    recording.eval(turn.prompt_token_ids, len(turn.prompt_token_ids) - 1)
    for token in turn.token_ids[:-1]:
        recording.eval([token], 0)
    return rows


FOLLOW_UPS = [f"follow-up {i}: now make the function iterative and add a docstring"
              for i in range(12)]


def check_long_conversation(target: Backend, draft: Backend, policy: str,
                            near_tie: float) -> list[ContextEvent]:
    """Twelve follow-ups, three times the context and more, under `policy`: every turn answers,
    and each greedy speculative reply equals a target-only session's on the same history (the
    same turns left out, the same prompt), up to a near-tie. Returns the context events."""
    spec = ChatSession(SpeculativeEngine(target, ModelDrafter(draft, GREEDY,
                                                              np.random.default_rng(0)),
                                         GREEDY, DraftSettings(k=3)), context_policy=policy)
    settings = GenerationSettings(max_tokens=40)
    seen = []
    for text in FOLLOW_UPS:
        plain = ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY),
                            Conversation(messages=list(spec.conversation.messages)), policy)
        plain_events = [e for e in plain.turn(text, settings) if not isinstance(e, ContextEvent)]
        events = list(spec.turn(text, settings))
        turn = events[-1]
        assert isinstance(turn, TurnEvent) and turn.n_tokens > 0
        assert turn.stop_reason == "max_tokens"
        assert turn.prompt_token_ids == plain_events[-1].prompt_token_ids
        assert_same_up_to_a_near_tie(plain_events, turn, near_tie)
        seen += [e for e in events if isinstance(e, ContextEvent)]
    whole = spec.render(spec.conversation.messages)
    assert len(whole) > 3 * target.n_ctx
    return seen


def short_history(n: int) -> list[tuple[str, str]]:
    return [m for i in range(n) for m in (("user", f"q{i}"), ("assistant", f"a{i}"))]


def check_reply_makes_room(target: Backend, draft: Backend, near_tie: float) -> None:
    """Eight short turns fit at the start (a 256-token context); the long reply then leaves
    older ones out as it grows, the target re-evaluates, and the reply ends where target-only's
    does, with both caches consistent."""
    drafter = ModelDrafter(draft, GREEDY, np.random.default_rng(0))
    spec = ChatSession(SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=3)),
                       Conversation(messages=short_history(8)), "rolling")
    plain = ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY),
                        Conversation(messages=short_history(8)), "rolling")
    settings = GenerationSettings(max_tokens=150)
    plain_events = list(plain.turn("write a long answer", settings))
    events = list(spec.turn("write a long answer", settings))
    turn = events[-1]
    assert isinstance(turn, TurnEvent) and turn.stop_reason == "max_tokens"
    shifts = [e for e in events if isinstance(e, ContextEvent) and e.during_reply]
    assert shifts and turn.context_shifts == len(shifts)
    assert turn.shift_tokens == sum(e.reeval_tokens for e in shifts) > 0
    assert [e.left_out for e in shifts] == sorted({e.left_out for e in shifts})
    assert turn.decode_s < turn.wall_s - turn.shift_s  # the re-evaluation is not decode time
    base = [e for e in plain_events if not isinstance(e, ContextEvent)]
    assert base[-1].context_shifts == turn.context_shifts
    assert_same_up_to_a_near_tie(base, turn, near_tie)
    # the target's cache holds the prompt the reply went on from and the reply (all but its
    # last token, which is never evaluated); the draft's cache is a prefix of it
    prompt = shifts[-1].prompt_tokens
    assert len(target.tokens) in (prompt + turn.n_tokens - 1, prompt + turn.n_tokens)
    assert target.tokens[prompt:] == turn.token_ids[: len(target.tokens) - prompt]
    assert draft.tokens == target.tokens[: len(draft.tokens)]
    assert spec.conversation.messages[-1] == ("assistant", turn.text)


SAMPLING = SamplingParams(temperature=0.8, top_p=0.95)


def expected_pairs(target, ids: list[int]) -> dict[tuple[int, int], float]:
    """The target's own probability of each (first, second) reply token, computed directly."""
    target.truncate(0)
    p0 = SAMPLING.distribution(target.eval(ids, len(ids) - 1)[0])
    pairs = {}
    for t0 in np.flatnonzero(p0 > 1e-5):
        target.truncate(len(ids))
        p1 = SAMPLING.distribution(target.eval([int(t0)], 0)[0])
        for t1 in np.flatnonzero(p1 > 0):
            pairs[(int(t0), int(t1))] = float(p0[t0] * p1[t1])
    target.truncate(0)
    return pairs


def sampled_pairs(engine, target, ids: list[int], n: int) -> list[tuple[int, int]]:
    eos = next(t for t in range(target.n_vocab) if target.is_eog(t))
    out = []
    for _ in range(n):
        turn = list(engine.generate(ids, GenerationSettings(max_tokens=3)))[-1]
        seq = turn.token_ids + ([eos] if turn.stop_reason == "eos" else [])
        out.append((seq[0], seq[1]) if len(seq) > 1 else (seq[0], -1))
    return out


def check_sampling_rule(engine, target, ids: list[int], exact: bool = True,
                        n: int = 3000) -> None:
    """The first two tokens of n replies against the target's own distribution of them
    (chi-square): they follow it where the engine's rule is exact, and a wrong rule's do not."""
    expected = expected_pairs(target, ids)
    p_value = pair_chi_square_p(sampled_pairs(engine, target, ids, n), expected)
    assert p_value > 1e-4 if exact else p_value < 1e-4, f"chi-square p-value {p_value:.2g}"


def wrong_rule(draft, q_dists, p_dists, rng):
    """A common mistake: on rejection, resample from p instead of norm(max(0, p - q))."""
    for i, d in enumerate(draft):
        q_tok = 1.0 if q_dists is None else q_dists[i][d]
        if rng.random() * q_tok >= p_dists[i][d]:
            return Verdict(i, sample(p_dists[i], rng))
    return Verdict(len(draft), sample(p_dists[len(draft)], rng))


def chi_square_p(counts: np.ndarray, p: np.ndarray) -> float:
    """Goodness of fit of `counts` to `p`. Outcomes expected fewer than 5 times are pooled, and
    a pool still expected fewer than 5 times joins the smallest other bin (a single count of a
    1e-7 outcome must not decide the test)."""
    n = counts.sum()
    keep = p * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep] * n, p[~keep].sum() * n)
    if exp[-1] < 5 and obs.size > 1:
        smallest = int(np.argmin(exp[:-1]))
        obs[smallest] += obs[-1]
        exp[smallest] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if obs.size < 2:  # one possible outcome: it must be all of them
        return 1.0 if np.allclose(obs, exp) else 0.0
    return float(chisquare(obs, exp).pvalue)


def pair_chi_square_p(samples, expected) -> float:
    cells = sorted(expected)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells) + 1)
    for pair in samples:
        counts[index.get(pair, len(cells))] += 1
    probs = np.append([expected[c] for c in cells], max(0.0, 1 - sum(expected.values())))
    return chi_square_p(counts, probs / probs.sum())


def require_module(name: str, how: str = "./install.sh --dev") -> None:
    """A Python package the tests need (torch, transformers): missing is `missing`'s rule."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        missing(name, how)


def missing(what: str, how: str) -> NoReturn:
    """A part the tests need is not here: a failure where CI asked for everything
    (SPECCHAT_REQUIRE_E2E, set by .ci/run, which installs it), else a skip that says how."""
    import pytest

    if os.environ.get("SPECCHAT_REQUIRE_E2E"):
        pytest.fail(f"{what} is required here: {how}")
    pytest.skip(f"{what} is not here: {how}", allow_module_level=True)  # a module's own check
