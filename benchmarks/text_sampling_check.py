"""Sampling across vocabularies on the real pair: the first two reply tokens drawn by the engine
with a draft of another vocabulary (TLI, engine/text_drafter.py) against the target's own
probability of each pair, by chi-square, beside the same run with a subtly wrong verify rule
(resampling from p on a rejection), which must fail. The tiny pair's test
(tests/engine/test_text_drafter.py) runs in CI; this is the check on real models (a benchmark:
minutes, not a test).

    .venv/bin/python -m benchmarks.text_sampling_check --draft smollm2-135m-instruct-q4_1 --samples 1000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import arguments
from specchat.engine import loop
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.verify import verify_sampling
from specchat.loading import load_drafter, load_target
from specchat.settings import ModelOptions, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.checks import (  # noqa: E402  (the tests' own statistics, one copy)
    SAMPLING,
    expected_pairs,
    pair_chi_square_p,
    sampled_pairs,
    wrong_rule,
)

PROMPT = "Write a haiku about the sea."


def main() -> int:
    ap = arguments.parser(__doc__, Settings(ModelOptions(draft="smollm2-135m-instruct-q4_1")))
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--prompt", default=PROMPT, help="the user message (default: %(default)s)")
    ap.add_argument("--rules", default="p/q,wrong",
                    help="which rules to sample: p/q, wrong, or both (default: %(default)s)")
    args = ap.parse_args()
    models = arguments.settings(args).models
    target = load_target(models.target, models)
    ids = target.tokenize(target.render_chat([("user", args.prompt)]))
    expected = expected_pairs(target, ids)
    print(f"{target.name}, draft {models.draft}, {len(expected)} pairs with probability > 0, "
          f"{args.samples} samples a rule, temperature {SAMPLING.temperature}, top-p "
          f"{SAMPLING.top_p}")
    rules = {"p/q": verify_sampling, "wrong": wrong_rule}
    if unknown := set(args.rules.split(",")) - set(rules):
        ap.error(f"unknown rule(s): {', '.join(sorted(unknown))} (p/q or wrong)")
    for name in args.rules.split(","):
        rule = rules[name]
        rng = np.random.default_rng(5)
        drafter = load_drafter(models.draft, target, SAMPLING, rng, models)
        loop.verify_sampling = rule
        engine = SpeculativeEngine(target, drafter, SAMPLING, DraftSettings(k=2), rng)
        t0 = time.perf_counter()
        samples = sampled_pairs(engine, target, ids, args.samples)
        print(f"{name} rule: chi-square p = {pair_chi_square_p(samples, expected):.3g} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        drafter.close()
    loop.verify_sampling = verify_sampling
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
