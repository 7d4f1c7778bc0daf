"""End to end on the real default pair (Qwen2.5-Coder 1.5B target, 0.5B draft).

Greedy 64-token replies with the 0.5B draft (chains and draft trees) and with the n-gram drafter
are held to the engine's rule against target-only: identical up to a first divergence, and there
a near-tie in the target-only run (the threshold is measured here, on this pair, from how far
batching moves the top-2 logit gap). Every divergence is reported in the terminal summary. The
tree's sampling rule keeps the target's distribution on this pair's own p and q.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.checks import (
    DIVERGENCES,
    assert_same_up_to_a_near_tie,
    missing,
    near_tie_threshold,
    require_module,
)
from support.processes import RpcServer

from specchat.chat.session import ChatSession
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TokenEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import TreeSettings
from specchat.engine.sampling import SamplingParams

pytestmark = pytest.mark.e2e

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a hash map is in three sentences.",
    "List five uses of the Linux command grep, with an example each.",
    "Rewrite this loop as a list comprehension: result = []\nfor x in range(10):\n"
    "    if x % 2 == 0:\n        result.append(x * x)",
]
N_TOKENS = 64
GREEDY = SamplingParams()
NEAR_TIE_CEILING = 0.83
"""The largest top-2 logit gap these tests accept as a near-tie on the default pair, whatever
they calibrate: three times what llama.cpp's batch-dependent rounding moved it on the path
specchat's patches do not touch (unrepacked weights: 0.277 on the target, 0.285 on the draft;
repacked: 0.340 and 0.317; six prompts, batches of 2-8, `python -m benchmarks.batching_drift`,
docs/divergence.md). A batched kernel that rounds too far fails the calibration instead of
raising the threshold that would excuse it."""


@pytest.fixture(scope="module", params=["shipped", "cpu-q4_0"])
def pair(request):
    """The pair in each layout: as shipped, and re-laid for the CPU (greedy identity is held
    against target-only in the same layout)."""
    from specchat.backends.llamacpp import LlamaCppBackend

    files = request.getfixturevalue("shipped_pair" if request.param == "shipped"
                                    else "optimized_pair")
    target = LlamaCppBackend(files[0], n_ctx=2048)
    draft = LlamaCppBackend(files[1], n_ctx=2048)
    yield target, draft
    target.close()
    draft.close()


def reply(engine: SpeculativeEngine, prompt: str) -> tuple[list[TokenEvent], TurnEvent]:
    events = list(ChatSession(engine).turn(prompt, GenerationSettings(max_tokens=N_TOKENS)))
    return [e for e in events if isinstance(e, TokenEvent)], events[-1]


@pytest.fixture(scope="module")
def baselines(pair):
    target, _ = pair
    return {p: reply(SpeculativeEngine(target, NoDrafter(), GREEDY), p) for p in PROMPTS}


@pytest.fixture(scope="module")
def near_tie(pair, baselines) -> float:
    """The one near-tie rule (support.checks) over two calibration replies, under this pair's
    ceiling."""
    target, _ = pair
    runs = [(baselines[p][1].prompt_token_ids, baselines[p][1].token_ids[:32]) for p in PROMPTS[:2]]
    threshold = near_tie_threshold(target, runs, NEAR_TIE_CEILING, batch_sizes=(2, 4))
    DIVERGENCES.append(f"{target.name}: near-tie threshold {threshold:.3f}")
    return threshold


@pytest.mark.parametrize("drafter", ["0.5B", "0.5B tree", "ngram"])
@pytest.mark.parametrize("prompt", PROMPTS, ids=range(len(PROMPTS)))
def test_greedy_speculation_equals_target_only_up_to_a_near_tie(
    pair, baselines, near_tie, prompt, drafter
):
    target, draft = pair
    base_tokens, base = baselines[prompt]
    if drafter.startswith("0.5B"):
        tree = TreeSettings() if drafter.endswith("tree") else None
        spec = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                                 GREEDY, DraftSettings(k=3, tree=tree))
    else:
        spec = SpeculativeEngine(target, NgramDrafter(3), GREEDY, DraftSettings(k=3))
    tokens, turn = reply(spec, prompt)
    assert turn.counts.n_tokens > 0
    unsure = any(e.q is not None and e.q < 0.9 and not e.branch for e in tokens)
    if drafter.endswith("tree") and unsure:  # beside a draft token under 0.9: a branch
        assert any(e.branch for e in tokens)
    assert_same_up_to_a_near_tie([*base_tokens, base], turn, near_tie, target=target,
                                 ceiling=NEAR_TIE_CEILING)


def test_every_token_is_the_argmax_of_the_logits_the_engine_computed(pair):
    """Exactness on the real pair: each emitted token is the target's argmax in the very rows
    the engine received for its position; speculation drafted, accepted and saved passes."""
    from support.models import RecordingBackend

    target, draft = pair
    recording = RecordingBackend(target)
    spec = SpeculativeEngine(recording, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                             GREEDY, DraftSettings(k=3))
    tokens, turn = reply(spec, PROMPTS[0])
    n_prompt = len(turn.prompt_token_ids)
    for event in tokens:
        if event.kind != "rejected":
            assert event.id == int(recording.rows[n_prompt + event.position].argmax())
    assert turn.counts.n_drafted > 0 and turn.counts.acceptance_rate > 0.5
    assert turn.counts.target_passes < turn.counts.n_tokens  # speculation saved target passes


def test_tree_sampling_keeps_the_targets_distribution_on_the_real_pair(pair):
    """The multi-draft rule on this pair's own distributions where they differ (mid-sentence in
    a poem, temperature 1: the 1.5B 81% sure, the 0.5B 15%): the chain's token drawn from the
    0.5B's q and two alternatives drawn without it, as the drafter draws them, tested against
    the 1.5B's p; the first token committed follows p (chi-square), and a rule that tests every
    sibling against p as it was, never its residual, does not."""
    from support.checks import chi_square_p

    from specchat.engine.sampling import sample
    from specchat.engine.tree import DraftTree, TreeVerdict, verify_tree_sampling
    from specchat.engine.types import Branch, Draft

    target, draft = pair
    ids = target.tokenize(target.render_chat([("user", "Write a short poem about the sea.")])
                          + "The sea is a")
    target.truncate(0)
    draft.truncate(0)
    sampling = SamplingParams(temperature=1.0)
    p = sampling.distribution(target.eval(ids, len(ids) - 1)[0])
    q = sampling.distribution(draft.eval(ids, len(ids) - 1)[0])
    target.truncate(0)
    draft.truncate(0)
    rng = np.random.default_rng(5)
    drafter = ModelDrafter(draft, sampling, rng)

    def keeps_p(tree, p_dists, rng):
        for child in tree.children(-1):
            tok, r = tree.tokens[child], tree.proposal(child, p.size)
            if rng.random() * r[tok] < p[tok]:
                return TreeVerdict([child], 0)
        return TreeVerdict([], sample(p, rng))

    counts = {rule: np.zeros(p.size) for rule in ("multi-draft", "p kept")}
    for _ in range(8000):
        tok = sample(q, rng)
        others, _ = drafter._drawn_without(q, tok, 2)
        tree = DraftTree.of(Draft(tokens=[tok], q=[float(q[tok])], dists=[q],
                                  branches=[Branch(0, [t], [c], [q]) for t, c in others]))
        for rule, verify in (("multi-draft", verify_tree_sampling), ("p kept", keeps_p)):
            verdict = verify(tree, [p] * (len(tree) + 1), rng)
            counts[rule][tree.tokens[verdict.path[0]] if verdict.path else verdict.next_token] += 1
    assert chi_square_p(counts["multi-draft"], p) > 1e-4
    assert chi_square_p(counts["p kept"], p) < 1e-4


# -- the transformers backend on the same pair (GGUFs converted once into the models folder) --
HF_TOKENS = 32


@pytest.fixture(scope="module")
def hf_pair(shipped_pair):
    require_module("torch")
    from specchat.backends.hf import TransformersBackend
    from specchat.catalog.catalog import models_dir

    target = TransformersBackend(shipped_pair[0], models_dir(), n_ctx=2048, device="cpu")
    draft = TransformersBackend(shipped_pair[1], models_dir(), n_ctx=2048, device="cpu")
    yield target, draft
    target.close()
    draft.close()


@pytest.mark.timeout(900)  # the first converts both GGUFs for transformers (two minutes here)
@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=range(2))
def test_transformers_backend_greedy_speculation_equals_target_only_up_to_a_near_tie(
    hf_pair, prompt
):
    check_pair(*hf_pair, prompt, HF_TOKENS)


def check_pair(target, draft, prompt: str, n_tokens: int) -> None:
    """Greedy speculation with the 0.5B draft at k=3 equals target-only up to a near-tie
    (the one rule, support.checks, over this reply's first 16 tokens)."""
    settings = GenerationSettings(max_tokens=n_tokens)
    base_events = list(ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY)).turn(
        prompt, settings))
    base = base_events[-1]
    near_tie = near_tie_threshold(target, [(base.prompt_token_ids, base.token_ids[:16])],
                                  NEAR_TIE_CEILING, batch_sizes=(2, 4))
    spec = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                             GREEDY, DraftSettings(k=3))
    turn = list(ChatSession(spec).turn(prompt, settings))[-1]
    assert turn.counts.n_drafted > 0 and turn.counts.acceptance_rate > 0.5
    assert_same_up_to_a_near_tie(base_events, turn, near_tie, target=target,
                                 ceiling=NEAR_TIE_CEILING)


@pytest.fixture(scope="module")
def rpc_pair(shipped_pair, tmp_path_factory):
    """The 1.5B target on a loopback `specchat rpc-server` (driven from a child process, as
    specchat runs it), the 0.5B draft here."""
    from specchat.backends.isolated import IsolatedBackend
    from specchat.backends.llamacpp import LlamaCppBackend

    server = RpcServer(tmp_path_factory.mktemp("rpc"), threads=2)
    target = IsolatedBackend(shipped_pair[0], rpc=server.endpoint, n_ctx=2048)
    draft = LlamaCppBackend(shipped_pair[1], n_ctx=2048)
    yield target, draft
    target.close()  # before the server goes: freeing its buffers talks to it
    draft.close()
    server.stop()


RPC_TOKENS = 32


@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=range(2))
def test_a_target_on_an_rpc_server_speculates_like_target_only(rpc_pair, prompt):
    assert rpc_pair[0].where.startswith("RPC 127.0.0.1:")
    check_pair(*rpc_pair, prompt, RPC_TOKENS)


TUNE_PROMPT = '''
[[prompt]]
category = "code"
name = "one"
text = "Write a Python function that reverses a string."
'''


def test_tune_times_every_installed_draft_the_other_vocabulary_as_text(shipped_pair, tmp_path):
    """README's `tune` with every catalog model installed as the real file, the draft of another
    vocabulary (SmolLM2, one menu choice away) among them: each drafter is timed, that one on
    its own tokens (the target's ids fed to it failed the whole command), and each has arms."""
    import json

    from support.models import lay_default_pair
    from support.processes import specchat

    from specchat.catalog.catalog import Catalog, models_dir

    other = Catalog.load().models["smollm2-135m-instruct-q4_1"]
    real = models_dir() / other.file
    if not real.is_file():
        missing(other.name, "specchat models fetch smollm2-135m-instruct-q4_1")
    models = lay_default_pair(tmp_path / "models", *shipped_pair)
    (models / other.file).symlink_to(real)
    prompts = tmp_path / "prompts.toml"
    prompts.write_text(TUNE_PROMPT)
    done = specchat("tune", "--prompts", str(prompts), "--max-tokens", "8", "--json",
                    tmp_path=tmp_path, quiet_cpu=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["untimed"] == {}
    assert set(result["draft_ms"]) == {"default", "ngram", "ngram+default",
                                       "smollm2-135m-instruct-q4_1"}
    assert result["draft_ms"]["smollm2-135m-instruct-q4_1"] > 0
    assert "smollm2-135m-instruct-q4_1" in {a["draft"] for a in result["drafters"]}
