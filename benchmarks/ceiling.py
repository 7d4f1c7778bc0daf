"""What speculation can buy on this machine at best: for each draft length, a reply drafted at
that fixed length (`specchat ask --policy fixed --k K --json`, one process a reply), its rounds'
own costs (a draft pass, the verify of k+1 tokens, medians over the rounds that drafted k) and
its target-only steps (the baseline the reply timed beside its rounds, so both are of the same
process and moment), and from them the speedup a round would bring were every draft to stand,
beside what the reply brought. A goal above the best ceiling cannot be met by any policy here.

    .venv/bin/python -m benchmarks.ceiling --repeats 3
"""

from __future__ import annotations

import statistics

from benchmarks import arguments
from benchmarks.policy_ab import ask_events

CODE = ("Write a Python class LRUCache with get and put in O(1), using a dict and a doubly "
        "linked list, with type hints.")


def ceiling(events: list[dict], k: int) -> tuple[float, float, float, float, float] | None:
    """(plain step ms, draft pass ms, verify ms of k+1 tokens, the speedup were every draft to
    stand, the speedup the reply brought), from the reply's own rounds; None where it ran no
    round of k or timed no target-only step."""
    turn = events[-1]
    rounds = [e for e in events if e.get("type") == "round" and e["drafted"] == k]
    base = turn["baseline_tokens_per_second"]
    if not rounds or not base:
        return None
    draft = statistics.median(r["draft_s"] for r in rounds) / k
    verify = statistics.median(r["verify_s"] for r in rounds)
    best = (k + 1) / (k * draft + verify) / base
    return 1000 / base, 1000 * draft, 1000 * verify, best, turn["speedup"] or 0.0


def main() -> None:
    ap = arguments.parser(__doc__, models=None, repeats=3, tokens=200)
    ap.add_argument("--prompt", default=CODE, help="the message (default: a code request)")
    ap.add_argument("--lengths", default="1,2,3", help="draft lengths, comma-separated "
                    "(default: %(default)s)")
    args = ap.parse_args()
    lengths = [int(k) for k in args.lengths.split(",")]
    best: dict[int, list[float]] = {k: [] for k in lengths}
    for rep in range(args.repeats):
        for k in lengths[rep % len(lengths):] + lengths[:rep % len(lengths)]:
            found = ceiling(ask_events(args.prompt, ["--policy", "fixed", "--k", str(k),
                                                     "--max-tokens", str(args.tokens)]), k)
            if found is None:
                print(f"k={k}: no round of {k} or no target-only step timed", flush=True)
                continue
            step, draft, verify, top, got = found
            best[k].append(top)
            print(f"k={k}: plain step {step:.1f} ms, draft pass {draft:.1f} ms, verify of {k + 1} "
                  f"{verify:.1f} ms ({verify / step:.2f} steps): every draft standing "
                  f"{top:.2f}x, this reply {got:.2f}x", flush=True)
    for k, tops in best.items():
        if tops:
            print(f"k={k}: every draft standing, median {statistics.median(tops):.2f}x "
                  f"(from {min(tops):.2f} to {max(tops):.2f} over {len(tops)} replies)")


if __name__ == "__main__":
    main()
