"""A git revision's specchat against the working tree's, side by side with target-only, on the
suite: each reply is one `specchat ask --json` process (the revision's code from a copy of its
tree, the working tree's from here), the three arms interleaved per prompt in an order that
rotates by prompt and repeat. Prints each category's median ratio to target-only for both,
then the working tree's rate over the revision's, paired by prompt and repeat, with a 95%
interval, and how many replies had the same tokens: whether a change moved the speed beyond
the spread of single replies, and whether it changed a reply (a greedy one may part only at
a near-tie). The same table again from each reply's own speedup (its rate over the
target-only steps it timed beside its rounds): this machine's speed moves between processes
by up to a third, and within one process both move alike. Flags after `--` go to every
speculative `ask` (`-- --policy adaptive --k 8`).
What the policy learned (chat/learned.py) is kept in each arm's own data folder across the
run, as a user's asks keep it (`--memory kept`), or in none (`--memory fresh`: every reply a
new user's first); never in the user's own.

    .venv/bin/python -m benchmarks.policy_ab --against 414f396 --repeats 3
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Prompt, load_prompts
from specchat.chat.history import HISTORY_ENV

ROOT = Path(__file__).resolve().parents[1]


def tree_at(revision: str, folder: Path) -> Path:
    """The repository's files at `revision`, written into `folder`."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True)
    if archive.returncode:
        raise SystemExit(f"policy_ab: no revision {revision}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def ask_events(text: str, args: list[str], root: Path = ROOT, data: Path | None = None
               ) -> list[dict]:
    """The events of one `specchat ask --json` run by the specchat in `root`, its history (and
    the memory beside it) in the folder `data`, or in a new empty one: never the user's."""
    with tempfile.TemporaryDirectory(prefix="specchat-ask-data-") as empty:
        history = Path(data or empty) / "history.sqlite3"
        env = os.environ | {"PYTHONPATH": str(root), HISTORY_ENV: str(history)}
        done = subprocess.run([sys.executable, "-m", "specchat", "ask", text, "--json", *args],
                              cwd=root, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"ask at {root} failed: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def ask(root: Path, prompt: Prompt, args: list[str], data: Path | None = None) -> dict:
    """The turn line of `ask_events`."""
    return ask_events(prompt.text, args, root, data)[-1]


def main() -> None:
    ap = arguments.parser(__doc__, models=None, repeats=2, categories="", prompts=None, tokens=None)
    ap.add_argument("--against", default="HEAD", help="the git revision to compare the working "
                    "tree with (default: %(default)s)")
    ap.add_argument("--target", help="the target every arm runs (default: ask's)")
    ap.add_argument("--draft", help="the draft of both speculative arms (default: ask's)")
    ap.add_argument("--memory", choices=("kept", "fresh"), default="kept",
                    help="what the policy learned: kept by each arm across the run, or none "
                    "(default: %(default)s)")
    ap.add_argument("ask_args", nargs="*", help="more flags for the speculative arms' ask")
    args = ap.parse_args()
    models = ["--target", args.target] if args.target else []
    spec = [*models, *(["--draft", args.draft] if args.draft else []), *args.ask_args]
    with tempfile.TemporaryDirectory(prefix="policy_ab-") as copy:
        roots = {args.against: tree_at(args.against, Path(copy)), "tree": ROOT}
        data = {name: Path(copy) / f"data-{n}" if args.memory == "kept" else None
                for n, name in enumerate(roots)}
        for folder in filter(None, data.values()):
            folder.mkdir()
        print(f"memory: {args.memory}", flush=True)
        revisions_side_by_side(roots, load_prompts(args.prompts, arguments.categories(args)),
                               models, spec, args.repeats, args.tokens, data)


def revisions_side_by_side(roots: dict[str, Path], prompts: list[Prompt], models: list[str],
                           spec: list[str], repeats: int, tokens: int | None,
                           data: dict[str, Path | None]) -> None:
    """Each prompt through target-only and both revisions, the two in turn first (each
    revision's data folder `data[name]`, a new one each reply where None); the table."""
    against = next(iter(roots))
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    own: dict[tuple[str, str], list[float]] = defaultdict(list)
    same = {"replies": 0, "same": 0}
    for rep in range(repeats):
        for n, prompt in enumerate(prompts):
            most = tokens or prompt.max_tokens
            size = ["--max-tokens", str(most)] if most else []
            names = list(roots)[(rep + n) % 2:] + list(roots)[:(rep + n) % 2]
            turns = {"none": ask(ROOT, prompt, [*models, "--draft", "none", *size])}
            turns |= {name: ask(roots[name], prompt, [*spec, *size], data[name])
                      for name in names}
            rates = {name: turn["tokens_per_second"] or 0.0 for name, turn in turns.items()}
            for name in roots:
                ratios[(prompt.category, name)].append(rates[name] / rates["none"])
                own[(prompt.category, name)].append(turns[name]["speedup"] or 1.0)
            same["replies"] += 1
            same["same"] += turns[against]["token_ids"] == turns["tree"]["token_ids"]
            print(prompt.category, prompt.name, {k: round(v, 2) for k, v in rates.items()},
                  flush=True)
    report(ratios, prompts, against, "tree")
    print("each reply against its own target-only steps (the speedup it shows; a machine "
          "whose speed moves between processes moves both alike):")
    report(own, prompts, against, "tree")
    print(f"the same tokens from {against} and tree: {same['same']} of {same['replies']} "
          "replies")


def report(ratios: dict[tuple[str, str], list[float]], prompts: list, base: str,
           other: str) -> None:
    """Each category's median ratio to target-only for every arm (with its interval) and
    mean, then `other` over `base`, paired (`paired_median`)."""
    names = list(dict.fromkeys(name for _, name in ratios))
    for category in dict.fromkeys(p.category for p in prompts):
        print(category, *(f"{name}: median {median_interval(ratios[(category, name)])} "
                          f"mean {statistics.mean(ratios[(category, name)]):.3f}"
                          for name in names), sep=" | ")
    every = {name: [r for (_, n), rs in ratios.items() if n == name for r in rs]
             for name in names}
    print("all", *(f"{name}: median {statistics.median(rs):.3f}" for name, rs in every.items()),
          sep=" | ")
    for category in [*dict.fromkeys(p.category for p in prompts), "all"]:
        pick = every if category == "all" else {n: ratios[(category, n)] for n in names}
        print(f"{category}: {other} over {base}, {paired_median(pick[base], pick[other])}")


def median_interval(values: list[float]) -> str:
    """The median with its 95% interval (a percentile bootstrap, fixed seed)."""
    v = np.asarray(values)
    picks = np.random.default_rng(0).integers(0, len(v), (2000, len(v)))
    low, high = np.percentile(np.median(v[picks], axis=1), [2.5, 97.5])
    return f"{np.median(v):.3f} (95%: {low:.3f}-{high:.3f})"


def paired_median(base: list[float], other: list[float]) -> str:
    """The median of `other[i] / base[i]` (two arms' ratios to target-only on the same prompt
    and repeat) with its 95% interval (a percentile bootstrap over the pairs, fixed seed), and
    how many pairs `other` won: what tells two arms apart beyond the spread of replies."""
    r = np.asarray(other) / np.asarray(base)
    return f"median {median_interval(list(r))}, ahead in {int((r > 1).sum())} of {len(r)}"


if __name__ == "__main__":
    main()
