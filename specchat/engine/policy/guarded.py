"""The guarded policy: llama.cpp's rule (k tokens a round, stop below a confidence) while it
pays on this machine, and a shorter draft or none where it does not.

Each source's drafting rounds in each kind of text are held against a plain target step as this
machine runs it now: a length whose last rounds brought fewer tokens a second steps down (k,
then 1, then no draft), a short draft whose last rounds all stood tries k again where k
tokens, standing as often as tokens at their places have, would bring more (or after 12 such
rounds in a row, since those places learn nothing meanwhile), with probes
of 1 token now and then, and of k at once where the text changes (a code block opens, the
target grows sure of the text). No round drafts where even drafts that
always stood would lose to plain steps with the costs measured here (unless the length's own
last rounds beat plain steps: what they brought overrules the cost model), or where a draft model
must first catch up on what it missed and the text does not look predictable enough to earn
that back. It needs no history: a reply's first rounds decide; a later reply starts where the
last left each source and kind of text (and what earlier processes learned of the draft's
acceptance, where it was kept, informs the predictions: chat/learned.py)."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.policy.base import Prediction, Seen
from specchat.engine.policy.branching import TreeSettings
from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.fixed import FixedPolicy, _FixedPlan
from specchat.engine.policy.kind import PolicyKind
from specchat.engine.policy.rates import PRIOR_ACCEPT, RECENT_ROUNDS, Recent, expected_tokens
from specchat.engine.policy.reply import SURE_AT, Where
from specchat.engine.policy.schedule import PROBE_WHY, ProbeSchedule
from specchat.engine.text_kind import CODE
from specchat.engine.types import Draft, Plan

EVIDENCE_ROUNDS = 2
"""Drafting rounds at a length before what they brought decides whether the length stays;
in a code block `RECENT_ROUNDS`: its drafts mostly stand, and two rounds with one refused
token stepped a code reply down to 1 token, and then to none, where its drafts paid
(docs/lab/2026-12-07-a-code-reply-judged-on-four-rounds.md)."""
STOOD_WINDOWS = 3
"""Windows of `RECENT_ROUNDS` short-draft rounds, all standing, after which k is tried again
whatever the places past the first have stood: they learn nothing while only the first token
is drafted, and two unlucky k-token rounds where a code block opened kept k away for the rest
of a reply (docs/lab/2026-12-07-k-back-after-short-drafts-stood.md)."""
PROSE_UNTRIED = PRIOR_ACCEPT
"""Before a source's tokens were tested in prose, a catch-up there is priced at no more than
this acceptance, whatever the target's confidence, until the target has stayed sure of the
text (`ReplyState.stayed_sure`: a list is not prose): in prose the 0.5B draft's tokens stood
0.53-0.71 of the time and 0.39 where the target was 98% sure (text_kind.py), and catch-ups
priced at that confidence lost short prose replies
(docs/lab/2026-12-07-what-code-can-reach-here.md)."""
SURE_RISE = 0.15
"""Where drafting stopped, a probe comes at once when the target's running confidence rose by
0.15 since, to at least `SURE_AT`: the text grew predictable."""


@dataclass
class _Ladder:
    """Where one source stands in one kind of text: the draft length it runs now."""

    length: int
    why: str = ""
    """Why it stepped down last, from what it measured."""
    stopped_conf: float | None = None
    """The target's running confidence where drafting stopped."""
    stood_windows: int = 0
    """Windows of short-draft rounds in a row that all stood without k coming back."""


@dataclass(frozen=True)
class _Stop:
    """A round the policy declined: in which source and kind of text, and whether only the
    draft model's catch-up stood in the way."""

    where: Where
    catchup: bool


@dataclass
class _GuardedPlan(_FixedPlan):
    policy: GuardedPolicy | None = None
    left: int = 0
    """Tokens the reply may still write."""
    stop: _Stop | None = None
    """Where and for what it declined (None where it did not)."""

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        assert self.policy is not None
        self.asked = self.policy.length(source, uses_passes, behind, self)
        return self.asked

    def decline(self, why: str) -> int:
        self.declined, self.why = True, why
        return 0


class GuardedPolicy(FixedPolicy):
    """Draft k tokens a round, stepping down where this reply's rounds lose to plain steps."""

    kind = PolicyKind.GUARDED

    def __init__(self, k: int, p_min: float = 0.0, costs: CostModel | None = None,
                 tree: TreeSettings | None = None) -> None:
        super().__init__(k, p_min, costs, tree)
        self.name = f"guarded k={k}" + (" tree" if tree else "")
        self.ladders: dict[Where, _Ladder] = {}
        """Kept across replies: a reply starts where the last left each source and kind."""
        self.probes = ProbeSchedule()
        self.sat_out: _Stop | None = None
        """The last round drafted nothing because the policy declined it, there and for this
        (None where it drafted): the next round that drafts says why it went on again."""
        self._now: _GuardedPlan | None = None

    def _plan(self, cap: int) -> Plan:
        branching = self.tree.branching(priced=False) if self.tree else None
        self._now = _GuardedPlan(min(self.k, cap), self.p_min, self.costs, branching,
                                 policy=self, left=cap)
        return self._now

    def observe(self, draft: Draft, seen: Seen, predict: bool = True) -> Prediction:
        if draft.tokens:
            self.sat_out = None
        elif self._now is not None and self._now.stop is not None:
            self.sat_out = self._now.stop
        return super().observe(draft, seen, predict)

    def start_turn(self) -> None:
        self.probes.new_reply()
        super().start_turn()

    def length(self, source: str, uses_passes: bool, behind: int, plan: _GuardedPlan) -> int:
        """The draft length `source` runs this round (0: a plain step, with `plan.why`)."""
        costs, machine = self.costs, self.costs.machine
        if not machine.warm:  # first a plain target step: what every length is held against
            return 0
        where = costs.reply.where(source)
        ladder = self.ladders.setdefault(where, _Ladder(self.k))
        plain = 1.0 / machine.verify_s(1)
        seen, evidence = costs.reply.recent.get(where), self._evidence(where)
        if seen is not None and seen.n >= evidence and ladder.length:
            if seen.rate < plain:
                self._step_down(where, ladder, seen.rate, plain)
            else:
                self.probes.paid()
                if ladder.length < self.k and seen.window_due:
                    self._k_again(source, uses_passes, where, ladder, seen)
        probe = "" if ladder.length else self._probe_due(ladder)
        if not ladder.length and not probe:
            plan.stop = _Stop(where, catchup=False)
            return plan.decline(ladder.why)
        # a scheduled probe drafts 1 token: at k, a probe in prose lost two k-token rounds
        # each time before stepping down (docs/lab/2026-12-07-what-the-policy-remembers.md),
        # and 1-token rounds that all stand bring k back (`_k_beats`); text grown sure, k
        length = ladder.length or (1 if probe == PROBE_WHY else self.k)
        n = min(length, plan.k_max)
        seen = costs.reply.recent.get(where)  # what this length's own rounds brought, if any
        paid = seen is not None and seen.n >= evidence and seen.rate >= plain
        never = "" if paid else self._never_pays(source, uses_passes, n, plain)
        why, n = (never, n) if never else self._catchup(source, uses_passes, behind, n, plain,
                                                         plan.left)
        if why:
            if not probe:  # a probe's round was counted as declined already
                self.probes.declined()
            plan.stop = _Stop(where, catchup=not never)
            return plan.decline(why)
        if probe:
            self.probes.probe()
            ladder.length = length
            costs.reply.recent.pop(where, None)  # the probe's own rounds decide
        plan.resumed = probe or self._resumed_why(where)
        return n

    @staticmethod
    def _evidence(where: Where) -> int:
        """Rounds at a length before what they brought decides (`EVIDENCE_ROUNDS`)."""
        return RECENT_ROUNDS if where.kind == CODE else EVIDENCE_ROUNDS

    def _resumed_why(self, where: Where) -> str:
        """Why a round drafts where the last one was declined (empty where it was not)."""
        stop = self.sat_out
        if stop is None:
            return ""
        if where.kind != stop.where.kind:
            return f"the reply turned to {where.kind}, whose drafts are priced apart"
        if stop.catchup:
            guess = self.costs.predicted_accept(where.source)
            return ("the text looked predictable enough to catch the draft up"
                    + (f", {guess:.0%} of its tokens expected to stand" if guess is not None else ""))
        return "its drafts were expected to pay again"

    def _k_again(self, source: str, uses_passes: bool, where: Where, ladder: _Ladder,
                 seen: Recent) -> None:
        """After a window of short-draft rounds: k again where they all stood and k is
        expected to beat them, or where they all stood `STOOD_WINDOWS` windows in a row. The
        rate goes on reading the last rounds, so one refused token does not decide alone."""
        seen.judged()
        if not seen.all_stood(ladder.length):
            ladder.stood_windows = 0
            return
        ladder.stood_windows += 1
        if (ladder.stood_windows >= STOOD_WINDOWS
                or self._k_beats(source, uses_passes, seen.rate)):
            ladder.length, ladder.stood_windows = self.k, 0
            self.costs.reply.recent.pop(where, None)  # k's own rounds decide

    def _k_beats(self, source: str, uses_passes: bool, rate: float) -> bool:
        """Whether k-token drafts are expected to beat `rate` (what the short drafts brought),
        each token standing as often as the source's tokens at its place in a draft have
        stood: on prose the first token stands where the third seldom does, and trying k
        again there lost two rounds each time
        (docs/lab/2026-12-06-speculation-that-never-costs-the-user.md)."""
        machine = self.costs.machine
        if machine.pass_time(source) is None:
            return True
        accept = [self.costs.acceptance.position_rate(source, i, optimistic=True)
                  for i in range(self.k)]
        return expected_tokens(accept) / machine.round_s(source, self.k, uses_passes, 2) > rate

    def _step_down(self, where: Where, ladder: _Ladder, rate: float, plain: float) -> None:
        ladder.why = (f"{ladder.length}-token drafts brought {rate:.1f} tok/s, plain steps "
                      f"{plain:.1f}")
        ladder.length, ladder.stood_windows = (1 if ladder.length > 1 else 0), 0
        if not ladder.length:
            self.probes.stopped()
        ladder.stopped_conf = self.costs.reply.target_conf
        self.costs.reply.recent.pop(where, None)

    def _probe_due(self, ladder: _Ladder) -> str:
        """Where drafting stopped: why a probe is due (by the schedule, or the text grew
        predictable since), empty where none is."""
        self.probes.declined()
        conf, stopped = self.costs.reply.target_conf, ladder.stopped_conf
        if conf is not None and stopped is not None and conf >= max(stopped + SURE_RISE, SURE_AT):
            ladder.stopped_conf = conf
            return f"the target grew sure of the text (running confidence {conf:.2f})"
        return PROBE_WHY if self.probes.due else ""

    def _never_pays(self, source: str, uses_passes: bool, n: int, plain: float) -> str:
        """Why no draft of up to n tokens can beat a plain step, even one that always stood,
        at the costs measured here (empty where one can, or the draft's cost is not known)."""
        machine = self.costs.machine
        if machine.pass_time(source) is None:
            return ""
        best = max((m + 1) / machine.round_s(source, m, uses_passes, 2)
                   for m in range(1, n + 1))
        if best >= plain:
            return ""
        return f"drafts that always stood would bring {best:.1f} tok/s here, plain steps {plain:.1f}"

    def _catchup(self, source: str, uses_passes: bool, behind: int, n: int, plain: float,
                 left: int) -> tuple[str, int]:
        """Why a draft model that must first read what it missed would not earn that back
        within the reply's next tokens (inside a code block, or text the target stayed sure
        of, within the rest of the reply: code and lists run long and their drafts stand,
        docs/lab/2026-12-02-code-blocks-and-prose-what-the-target.md; priced over the next
        tokens alone, a list's catch-up grew with every round it sat out and was never taken,
        docs/lab/2026-12-07-a-list-s-catch-up-over-the-rest-of-the-reply.md),
        with each token standing as often as the target's running confidence, calibrated
        here, says (empty where it would, or it is in step), and the length the catch-up's
        round drafts: in a code block, that of up to n tokens expected to bring the most
        (where a verify batch of 4 costs twice a plain step, 1), elsewhere n: in prose the
        target's confidence promises more than the draft's tokens keep (text_kind.py), and
        pricing a catch-up at a short draft's rate drew it into prose. The drafting rounds'
        own yield takes over once they run."""
        machine, costs = self.costs.machine, self.costs
        steady = min(behind, 2)
        catchup_s = (machine.draft_s(source, 1, uses_passes, behind)
                     - machine.draft_s(source, 1, uses_passes, steady))
        if not uses_passes or catchup_s <= 0:
            return "", n
        guess = costs.predicted_accept(source)
        if guess is None:
            return "the text did not look predictable enough yet to catch the draft up", n
        code, sure = costs.reply.kind == CODE, costs.reply.stayed_sure
        if not (code or sure or costs.acceptance.tested(costs.reply.where(source))):
            guess = min(guess, PROSE_UNTRIED)
        rate, best = max((expected_tokens([guess] * m)
                          / machine.round_s(source, m, uses_passes, steady), m)
                         for m in (range(1, n + 1) if code else (n,)))
        if costs.pays_back(rate, plain, catchup_s, left, whole_reply=code or sure):
            return "", best
        return (f"a {best}-token draft was expected at {rate:.1f} tok/s after a "
                f"{catchup_s * 1000:.0f} ms catch-up, plain steps {plain:.1f}"), n
