"""The rules every engine must keep, as checks the tests of each backend call: greedy output
is the target's own, sampling follows the target's distribution (chi-square), long
conversations never dead-end."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import NoReturn

import numpy as np
from hypothesis import strategies as st
from scipy.stats import chisquare

from specchat.chat.session import ChatSession, Conversation
from specchat.engine.backend import Backend
from specchat.engine.combined_drafter import CombinedDrafter
from specchat.engine.compare import batching_gap_drift, divergence
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import ContextEvent, TokenEvent, TokenKind, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import PolicyKind, TreeSettings
from specchat.engine.sampling import SamplingParams, sample
from specchat.engine.verify import Verdict
from support import modes
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

NEAR_TIE_FACTOR = 2.0
"""The one near-tie rule, for every pair and backend: a greedy reply may part from target-only's
where target-only's top-2 gap is at most this many times the largest change of that gap that
batching caused on the pair's calibration replies (and at most the pair's ceiling). A flip needs
a gap under the drift at its own position; the factor is the margin for positions the
calibration did not read."""


def near_tie_threshold(target: Backend, runs: Sequence[tuple[Sequence[int], Sequence[int]]],
                       ceiling: float, floor: float = 0.0,
                       batch_sizes: Sequence[int] = (2, 3, 5, 8)) -> float:
    """NEAR_TIE_FACTOR times the largest gap drift batching causes over `runs` (prompt, reply
    ids), at least `floor`; failing where it exceeds `ceiling`: calibration can only lower the
    ceiling, never raise it (a batched kernel that rounds too far fails here)."""
    worst = max(batching_gap_drift(target, prompt, reply, batch_sizes) for prompt, reply in runs)
    threshold = NEAR_TIE_FACTOR * worst
    assert threshold <= ceiling, (
        f"batching moved {target.name}'s top-2 gap by {worst:.4f}: {NEAR_TIE_FACTOR:g} times "
        f"that is above the near-tie ceiling {ceiling} (a batched kernel that rounds too far?)")
    return min(ceiling, max(threshold, floor))


def calibrated_near_tie(target, floor: float) -> float:
    """The near-tie threshold of a tiny target: `near_tie_threshold` over the calibration
    prompts' target-only continuations, under NEAR_TIE_CEILING."""
    runs = []
    for text in CALIBRATION_PROMPTS:
        ids = prompt_ids(target, text)
        _, turn = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=24)
        runs.append((ids, turn.token_ids))
    return near_tie_threshold(target, runs, NEAR_TIE_CEILING, floor)


def make_drafter(kind: str, draft_backend):
    model = ModelDrafter(draft_backend, GREEDY, np.random.default_rng(0))
    return {"model": model, "ngram": NgramDrafter(2), "combined":
            CombinedDrafter(NgramDrafter(2, 6), model)}[kind]


GREEDY_CASES = {
    "text": st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x24F), min_size=1,
                    max_size=30),
    "k": st.integers(1, 6),
    "drafter": st.sampled_from(["model", "ngram", "combined"]),
    "policy": st.sampled_from(list(PolicyKind)),
}


PADDING_SHAPE = (1.0, 1.6, 2.1, 1.4, 2.1, 2.6, 3.0, 2.4, 3.0, 3.4, 3.8, 3.3)
"""A verify curve, in steps, where 4 and 8 tokens cost less than 2-3 and 5-7 (a Q4_0 layout on
x86 after specchat's patch, docs/lab/): given as known, it makes the engine pad."""


def check_greedy_rule(target: RecordingBackend, drafter, ids: list[int], k: int,
                      policy: PolicyKind, near_tie: float, padded: bool = False,
                      tree: TreeSettings | None = None) -> list:
    """The engine's greedy rule on any backend (`check_greedy_engine`) with `drafter` at k,
    under `policy`. `padded`: with a known curve that pads verify batches; `tree`: drafting
    trees. Returns the speculative run's events."""
    spec = SpeculativeEngine(target, drafter, GREEDY,
                             DraftSettings(k=k, policy_kind=policy, tree=tree))
    if padded:
        spec.policy.costs.machine.shape = PADDING_SHAPE
    return check_greedy_engine(target, spec, ids, near_tie)[0]


def check_greedy_engine(target: RecordingBackend, spec: SpeculativeEngine, ids: list[int],
                        near_tie: float, max_tokens: int = 32
                        ) -> tuple[list, tuple[int, float] | None]:
    """Every token of `spec`'s greedy reply is the argmax of the logits the engine computed for
    it in this run, and the reply is target-only's by the one greedy oracle. Returns the
    speculative run's events, and where it parted from target-only's at a near-tie."""
    base_rows = target.record()
    plain_events, _ = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids,
                          max_tokens=max_tokens)
    spec_rows = target.record()
    events, turn = run(spec, ids, max_tokens=max_tokens)
    for event in events:
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            assert event.id == int(spec_rows[len(ids) + event.position].argmax())
    parted = assert_same_up_to_a_near_tie(plain_events, turn, near_tie, base_rows)
    return events, parted


def assert_same_up_to_a_near_tie(plain_events: list, turn: TurnEvent, near_tie: float,
                                 base_rows: dict[int, np.ndarray] | None = None,
                                 target: Backend | None = None,
                                 ceiling: float = NEAR_TIE_CEILING) -> tuple[int, float] | None:
    """The one greedy oracle. The reply of `turn` equals the target-only run's (`plain_events`)
    token for token, with the same length and stop reason; or the two first part (a different
    token, or one ended where the other went on) at a position where the target-only run's
    top-2 logit gap is at most `near_tie`, never above `ceiling`. The gap comes from the
    target-only run's token events, else its rows (`base_rows`, by absolute position, as
    RecordingBackend records them), else from evaluating `target` (engine.compare.divergence).
    Every parting is listed in the run's summary."""
    base: TurnEvent = plain_events[-1]
    near_tie = min(near_tie, ceiling)
    tokens = [e for e in plain_events if isinstance(e, TokenEvent)]
    parted = divergence(target, base, tokens, turn, base_rows)
    if parted is None:
        assert turn.stop_reason == base.stop_reason, (
            f"the same tokens, but stopped for {turn.stop_reason!r} where target-only "
            f"stopped for {base.stop_reason!r}")
        return None
    at, gap = parted
    assert not (at == base.counts.n_tokens and base.stop_reason == "max_tokens"), (
        f"{turn.counts.n_tokens} tokens where target-only stopped at max_tokens after {base.counts.n_tokens}")
    assert gap is not None, (
        f"the replies part at {at} ({base.counts.n_tokens} tokens target-only, "
        f"{turn.counts.n_tokens} here) "
        "where the target-only run has no row to judge a near-tie by")
    DIVERGENCES.append(f"draft {turn.draft} ({turn.policy or 'no policy'}): parted at token {at} of "
                       f"{base.counts.n_tokens}, "
                       f"target-only top-2 gap {gap:.4f} (near-tie threshold {near_tie:.4f})")
    assert gap <= near_tie, (f"the replies part at {at} where target-only's top-2 gap is {gap:.4f},"
                             f" above the near-tie threshold {near_tie:.4f}")
    return at, gap


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
        assert isinstance(turn, TurnEvent) and turn.counts.n_tokens > 0
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
    assert shifts and turn.counts.context_shifts == len(shifts)
    assert turn.counts.shift_tokens == sum(e.reeval_tokens for e in shifts) > 0
    assert [e.left_out for e in shifts] == sorted({e.left_out for e in shifts})
    assert turn.counts.decode_s < turn.counts.wall_s - turn.counts.shift_s  # the re-evaluation is not decode time
    base = [e for e in plain_events if not isinstance(e, ContextEvent)]
    assert base[-1].counts.context_shifts == turn.counts.context_shifts
    assert_same_up_to_a_near_tie(base, turn, near_tie)
    # the target's cache holds the prompt the reply went on from and the reply (all but its
    # last token, which is never evaluated); the draft's cache is a prefix of it
    prompt = shifts[-1].prompt_tokens
    assert len(target.tokens) in (prompt + turn.counts.n_tokens - 1, prompt + turn.counts.n_tokens)
    assert target.tokens[prompt:] == turn.token_ids[: len(target.tokens) - prompt]
    assert draft.tokens == target.tokens[: len(draft.tokens)]
    assert spec.conversation.messages[-1] == ("assistant", turn.text)


SAMPLING = SamplingParams(temperature=0.8, top_p=0.95)


def expected_pairs(target, ids: list[int], sampling: SamplingParams = SAMPLING
                   ) -> dict[tuple[int, int], float]:
    """The target's own probability of each (first, second) reply token, computed directly
    (a reply that ends at the first token: its second is end-of-turn's id)."""
    target.truncate(0)
    p0 = sampling.distribution(target.eval(ids, len(ids) - 1)[0])
    pairs = {}
    for t0 in np.flatnonzero(p0 > 1e-5):
        target.truncate(len(ids))
        p1 = sampling.distribution(target.eval([int(t0)], 0)[0])
        for t1 in np.flatnonzero(p1 > 0):
            pairs[(int(t0), int(t1))] = float(p0[t0] * p1[t1])
    target.truncate(0)
    return pairs


def sampled_pairs(engine, target, ids: list[int], n: int, turns: list | None = None
                  ) -> list[tuple[int, int]]:
    """The first two tokens of n three-token replies (the second from the first speculative
    round, which may draft one; end-of-turn's id where a reply ended first); each reply's
    TurnEvent goes to `turns` where given."""
    eos = next(t for t in range(target.n_vocab) if target.is_eog(t))
    out = []
    for _ in range(n):
        turn = list(engine.generate(ids, GenerationSettings(max_tokens=3)))[-1]
        if turns is not None:
            turns.append(turn)
        seq = turn.token_ids + ([eos] if turn.stop_reason == "eos" else [])
        out.append((seq[0], seq[1]) if len(seq) > 1 else (seq[0], -1))
    return out


def check_sampling_rule(engine, target, ids: list[int], exact: bool = True,
                        n: int = 3000) -> None:
    """The first two tokens of n replies against the target's own distribution of them
    (chi-square): they follow it where the engine's rule is exact, and a wrong rule's do not."""
    expected = expected_pairs(target, ids, engine.sampling)
    turns: list[TurnEvent] = []
    p_value = pair_chi_square_p(sampled_pairs(engine, target, ids, n, turns), expected)
    assert sum(t.counts.n_drafted for t in turns) > 0, "no reply drafted: the check saw no speculation"
    assert p_value > 1e-4 if exact else p_value < 1e-4, f"chi-square p-value {p_value:.2g}"


MODE_PROMPT = ("0123456789 abcdefghijklmnopqrstuvwxyz.\nthe cat sat on the mat and the cat sat "
               "on the hat and the cat sat on")
"""Every mode's prompt: the n-gram drafters find `the cat sat on` twice before, gone on two
ways (a chain and a branch), and most single characters a sampled first token can be."""

WARM_UP = 4
"""Replies the engine of a mode whose policy learns the machine (adaptive, guarded) makes before
its check: an adaptive first reply has no acceptance measured yet and declines until a probe
comes; a guarded one takes a plain step before its first draft."""

WIDEST = 8
"""Candidates for the first and the second token whose triples the sampling check scores."""

MODE_FIGURES: dict[modes.Mode, str] = {}
"""Each mode its `test_mode` checked in this run, and the figure (conftest writes the table)."""


def expected_triples(target, ids: list[int], sampling: SamplingParams
                     ) -> dict[tuple[int, int, int], float]:
    """The target's own probability of the reply's first three tokens, for every third token
    after the WIDEST most likely first tokens and, after each, the WIDEST most likely second
    ones (end-of-turn ends a triple early, -1 after it): the cells a sampling check can score,
    each exact."""
    eos = next(t for t in range(target.n_vocab) if target.is_eog(t))

    def dist(seq: list[int]) -> np.ndarray:
        target.truncate(0)
        return sampling.distribution(target.eval(ids + seq, len(ids) + len(seq) - 1)[0])

    out = {}
    p0 = dist([])
    for t0 in np.argsort(p0)[::-1][:WIDEST]:
        t0 = int(t0)
        if t0 == eos:
            out[(t0, -1, -1)] = float(p0[t0])
            continue
        p1 = dist([t0])
        for t1 in np.argsort(p1)[::-1][:WIDEST]:
            t1 = int(t1)
            if t1 == eos:
                out[(t0, t1, -1)] = float(p0[t0] * p1[t1])
                continue
            p2 = dist([t0, t1])
            for t2 in np.flatnonzero(p2 > 0):
                out[(t0, t1, int(t2))] = float(p0[t0] * p1[t1] * p2[t2])
    target.truncate(0)
    return out


def sampled_triples(engine, target, ids: list[int], n: int, turns: list
                    ) -> list[tuple[int, int, int]]:
    """The first three tokens of n four-token replies (the second and third come from the
    first speculative round, which drafts two; end-of-turn's id where a reply ended, -1 after
    it); each reply's TurnEvent goes to `turns`."""
    eos = next(t for t in range(target.n_vocab) if target.is_eog(t))
    out = []
    for _ in range(n):
        turn = list(engine.generate(ids, GenerationSettings(max_tokens=4)))[-1]
        turns.append(turn)
        seq = turn.token_ids[:3] + ([eos] if turn.stop_reason == "eos" else []) + [-1, -1]
        out.append((seq[0], seq[1], seq[2]))
    return out


def mode_engine(mode: modes.Mode, target, draft, other_vocab, monkeypatch
                ) -> tuple[SpeculativeEngine, list[int]]:
    """The engine of `mode` over the tiny pair on any backend (`target` a RecordingBackend; the
    policies that learn the machine on a FakeClock where drafting pays, some replies old), read
    back as the mode, and the prompt."""
    base, learns = target, mode.policy != PolicyKind.FIXED
    if learns:
        target, draft, other_vocab = modes.on_fake_clock(monkeypatch, target, draft, other_vocab)
    rng = np.random.default_rng(zlib.crc32(mode.id.encode()))
    drafter = modes.make_drafter(mode.drafter, draft, other_vocab, target, mode.sampling, rng)
    spec = SpeculativeEngine(target, drafter, mode.sampling, mode.settings, rng)
    assert modes.mode_of(spec) == (mode.drafter, mode.policy, mode.tree, mode.sampling)
    ids = prompt_ids(base, MODE_PROMPT)
    if learns:  # a session some replies old: its costs and rates learned
        modes.knows_the_draft(spec)
        for _ in range(WARM_UP):
            run(spec, ids, max_tokens=32)
    return spec, ids


def check_mode(mode: modes.Mode, target, draft, other_vocab, near_tie: float, monkeypatch,
               ceiling: float = NEAR_TIE_CEILING) -> str:
    """One mode through the whole engine (`target` a RecordingBackend): greedy, the one greedy
    oracle; sampling, the reply's first three tokens in `modes.SAMPLES` replies (the second and
    third from a speculative round's verify, below a tree's root) against the target's own
    distribution (chi-square over `modes.cells`), with the check's power against the bias it
    must catch and a control of that bias that must fail. The mode must have drafted. Returns
    the table's figure."""
    spec, ids = mode_engine(mode, target, draft, other_vocab, monkeypatch)
    turns: list[TurnEvent] = []
    if mode.decoding == "greedy":
        events, parted = check_greedy_engine(target, spec, ids, near_tie)
        turns = [e for e in events if isinstance(e, TurnEvent)]
        figure = ("the same reply, 32 tokens" if parted is None else
                  f"parted at token {parted[0]}, a near-tie (gap {parted[1]:.4f} <= {near_tie:.4f})")
    else:
        figure = check_sampling_mode(spec, target, ids, turns)
    if mode.drafter != "none":
        assert sum(t.counts.n_drafted for t in turns) > 0, "the mode never drafted"
    return figure


def check_a_mode(mode: modes.Mode, target, draft, other_vocab, near_tie: float,
                 monkeypatch) -> str:
    """The check the table names for `mode`: `check_mode`, or `check_mode_rows` for a sampling
    mode of a target other than llama.cpp here (modes.checked_by_distribution)."""
    if mode.decoding == "greedy" or modes.checked_by_distribution(mode):
        return check_mode(mode, target, draft, other_vocab, near_tie, monkeypatch)
    return check_mode_rows(mode, target, draft, other_vocab, monkeypatch)


ROW_REPLIES = 12
"""Sampled replies whose rows `check_mode_rows` compares with target-only's."""
ROW_TOLERANCE = 0.02
"""How far a logit of a sampled token's row may be from target-only's: batching moved the tiny
target's logits by up to 0.0085 on an RPC server (its batch-dependent rounding; the rows are
its own either way), and a logit 0.02 off moves a probability by 2% of itself."""


def check_mode_rows(mode: modes.Mode, target, draft, other_vocab, monkeypatch) -> str:
    """A sampling mode on a target whose distribution check would take too long (transformers,
    RPC: a few ms a pass, 4,000 replies a mode): every token of ROW_REPLIES sampled 24-token
    replies was drawn from target-only's row for the same tokens (within ROW_TOLERANCE of each
    logit: the engine's sampling rule, checked on llama.cpp's rows in every mode, then sees the
    same p). Returns the figure."""
    spec, ids = mode_engine(mode, target, draft, other_vocab, monkeypatch)
    worst, drafted, tokens = 0.0, 0, 0
    for _ in range(ROW_REPLIES):
        rows = target.record()
        _, turn = run(spec, ids, max_tokens=24)
        plain = target_only_rows(target._inner, turn)
        for i in range(turn.counts.n_tokens):
            at = len(ids) + i
            worst = max(worst, float(np.abs(rows[at] - plain[at]).max()))
        drafted, tokens = drafted + turn.counts.n_drafted, tokens + turn.counts.n_tokens
    assert worst <= ROW_TOLERANCE, f"a sampled token's row was {worst:.4f} off target-only's"
    if mode.drafter != "none":
        assert drafted > 0, "the mode never drafted"
    return (f"rows as target-only's (logits at most {worst:.1e} apart, {tokens} tokens, "
            f"{drafted} drafted)")


def check_sampling_mode(spec: SpeculativeEngine, target, ids: list[int], turns: list) -> str:
    """`spec`'s first three tokens against the target's own (see `check_mode`); returns the
    figure: the p-value, the cells, the power and how often a draft took part."""
    expected = expected_triples(target, ids, spec.sampling)
    figure = judge_triples(sampled_triples(spec, target, ids, modes.SAMPLES, turns), expected)
    drafted = sum(t.counts.n_drafted > 0 for t in turns[-modes.SAMPLES:]) / modes.SAMPLES
    stood = sum(t.counts.n_accepted > 0 for t in turns[-modes.SAMPLES:]) / modes.SAMPLES
    return (f"{figure}; a draft in {drafted:.0%} of replies, a draft token stood in "
            f"{stood:.0%}")


def judge_triples(samples: list[tuple[int, int, int]],
                  expected: dict[tuple[int, int, int], float]) -> str:
    """Chi-square of `samples` against `expected` over `modes.cells`: fails below ALPHA, where
    the power against modes.BIAS_W2 is under 99%, or where a control of that bias drawn at the
    same size passes. Returns the figure."""
    n = len(samples)
    tested = modes.cells(expected, n)
    counts, probs = modes.cell_counts(samples, tested), modes.cell_probs(expected, tested)
    if probs[-1] <= 1e-12:  # the cells tested are all there is
        assert counts[-1] == 0, f"{counts[-1]:.0f} replies began where the target cannot"
        counts, probs = counts[:-1], probs[:-1] / probs[:-1].sum()
    p_value = float(chisquare(counts, probs * n).pvalue) if probs.size > 1 else 1.0
    power = modes.power(probs.size, n)
    assert power >= 0.99, f"{probs.size} cells, {n} replies: power {power:.3f}"
    if probs.size > 1:
        control = np.random.default_rng(0).multinomial(n, modes.biased(probs))
        p_control = float(chisquare(control, probs * n).pvalue)
        assert p_control < modes.ALPHA, f"the biased control passed: p {p_control:.2g}"
    assert p_value > modes.ALPHA, f"chi-square p-value {p_value:.2g}"
    return f"p = {p_value:.2f} ({probs.size} cells, power {power:.3f})"


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
