"""How often each draft source's tokens stand: by draft position, against the draft's own
confidence, against the target's running confidence, and how often a model's pass brings no
draft at all. Kept across conversations, shrunk to a prior at each new one."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from specchat.engine.policy.rates import PRIOR_ACCEPT, Rate, conf_bin, conf_rates, monotone
from specchat.engine.policy.reply import ReplyState, Where


@dataclass
class Acceptance:
    by_position: dict[str, list[Rate]] = field(default_factory=lambda: defaultdict(list))
    """P(draft token i stands | the ones before it stood), by source."""
    by_confidence: dict[str, list[Rate]] = field(default_factory=dict)
    """P(a token stands | the draft's own confidence in it, binned), by source."""
    empty: dict[tuple[str, bool], Rate] = field(default_factory=dict)
    """How often a model's pass ended in no draft (a pass paid for nothing), kept apart by
    whether the source's previous pass was empty too: on prose they come in runs."""
    by_target_conf: dict[Where, list[Rate]] = field(default_factory=dict)
    """P(a token stands | the target's running confidence when the round began, binned): how
    predictable the text is, read from the target for free, priced in before a model pays to
    catch up. Not shrunk at a new conversation: it ties predictability to acceptance, which
    is the pair's more than the text's."""

    def position_rate(self, source: str, i: int, optimistic: bool = False) -> float:
        """P(draft token i stands | the ones before it stood); `optimistic` for choosing a
        length (`Rate.optimistic`). A position not yet tested is taken as good as the one
        before it, without the optimism: a source nothing is known of tries a short draft
        first, not the longest batch that would pay if every token stood."""
        rates = self.by_position[source]
        tested = i < len(rates)
        rate = rates[i] if tested else rates[-1] if rates else Rate(PRIOR_ACCEPT)
        return rate.optimistic if optimistic and (tested or i == 0) else rate.mean

    def empty_rate(self, source: str, reply: ReplyState) -> float:
        """P(the source's next pass brings no draft), given whether its latest one did."""
        rate = self.empty.get((source, reply.last_empty.get(source, False)))
        return rate.mean if rate else 0.0

    def predicted(self, source: str, reply: ReplyState, optimistic: bool = False) -> float | None:
        """P(a token of `source` stands) as the target's running confidence predicts it (fitted
        to rise with it; the hopeful estimate capped by every surer level's); None before the
        running confidence has seen enough of the reply."""
        at = reply.conf_bin
        if at is None or not reply.confident_enough:
            return None
        fitted = monotone(self.by_target_conf.get(reply.where(source)) or conf_rates())
        return min(rate.optimistic if optimistic else rate.mean for rate in fitted[at:])

    def tested(self, where: Where) -> bool:
        """Whether any of a source's tokens were tested in this kind of text (else what the
        target's confidence predicts there is its prior alone)."""
        return where in self.by_target_conf

    def confidence_rate(self, source: str, conf: float) -> float:
        bins = self.by_confidence.get(source)
        return min(conf, PRIOR_ACCEPT + 0.3) if bins is None else bins[conf_bin(conf)].mean

    def best_confidence_rate(self, source: str) -> float:
        """The highest `confidence_rate` any confidence of the draft can get."""
        bins = self.by_confidence.get(source)
        return PRIOR_ACCEPT + 0.3 if bins is None else max(b.mean for b in bins)

    def observe(self, source: str, accepted: int, tested: int, conf: list[float]) -> None:
        """Which of a round's tested draft tokens stood, against position, the draft's
        confidence and the running confidence the round began with."""
        rates = self.by_position[source]
        for i in range(tested):
            if i == len(rates):
                rates.append(Rate(self.position_rate(source, i)))
            rates[i].add(i < accepted)
        if conf:
            bins = self.by_confidence.setdefault(source, conf_rates())
            for i in range(tested):
                bins[conf_bin(conf[i])].add(i < accepted)

    def observe_target_conf(self, source: str, accepted: int, tested: int,
                            reply: ReplyState) -> None:
        at = reply.conf_bin
        if source and tested and at is not None:
            bins = self.by_target_conf.setdefault(reply.where(source), conf_rates())
            for i in range(tested):
                bins[at].add(i < accepted)

    def observe_pass(self, source: str, empty: bool, reply: ReplyState) -> None:
        """A model's pass ran: whether it brought a draft."""
        after = reply.last_empty.get(source, False)
        self.empty.setdefault((source, after), Rate(0.0)).add(empty)
        reply.last_empty[source] = empty

    def new_conversation(self) -> None:
        """Keep how well each source drafted only as a prior of a few observations, so the new
        conversation's own acceptance takes over within a few rounds."""
        for rates in [*self.by_position.values(), *self.by_confidence.values(),
                      self.empty.values()]:
            for rate in rates:
                rate.shrink()
