"""Why speculation is faster or slower here: this machine's costs, plotted, and the lesson in
words with its own numbers.

Left: what verifying n tokens costs in target steps, as timed on the models at the
conversation's depth (and, for the what-if, a GPU's flat curve). Right: the expected speedup
against k for the draft model and for a drafter that costs nothing (n-gram lookup), at the
acceptance per position this conversation measured (or a what-if one), with the break-even line
and this conversation's turns as measured points. Plots are textual-plotext (Textualize's own
wrapper of plotext: it follows the app's theme, draws axes and labels, and needs no canvas code
of ours).
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from specchat import cpu
from specchat.costs import (
    ALT_STANDS,
    Costs,
    MeasuredTurn,
    best_k,
    branch_stands,
    break_even,
    check_turn,
    speedup,
    tree_speedup,
)
from specchat.engine.loop import SpeculativeEngine
from specchat.errors import SpecchatError
from specchat.keeper import ModelKeeper
from specchat.native import model_thread
from specchat.timing import COST_REPEATS
from specchat.ui.messages import CostsMeasured

K_MAX = 8
DEFAULT_ACCEPT = 0.8
"""The what-if acceptance before the conversation has measured one."""
STEP = 0.05


def guarded_rungs(costs: Costs, k: int) -> list[tuple[int, float | None]]:
    """The draft lengths the guarded policy steps through (k, then 1) with the acceptance at
    which each breaks even here (None: none pays)."""
    return [(n, break_even(costs, n)) for n in sorted({max(1, k), 1}, reverse=True)]


def guarded_words(costs: Costs, k: int) -> str:
    """The default policy's threshold, with this machine's numbers."""
    rungs = guarded_rungs(costs, k)
    if all(even is None for _, even in rungs):
        return ("The guarded policy (the default) does not draft here: no draft length would "
                "pay even if every draft stood.")
    said = "; ".join(f"{n} token{'s' if n > 1 else ''} while about {even:.0%} stand"
                     if even is not None else f"{n} token{'s' if n > 1 else ''} never"
                     for n, even in rungs)
    return ("The guarded policy (the default) keeps a draft length while its last rounds bring "
            "more tokens a second than plain steps, and steps down (k, then 1, then none) "
            f"below that. On this curve a length pays, at every position: {said}.")


class CostsScreen(Screen):
    """F7 from the chat; +/- move the acceptance, G switches the verify curve, M measures
    again, Esc closes."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Close"),
                Binding("plus", "accept(1)", "Acceptance +5%"),
                Binding("minus", "accept(-1)", "Acceptance -5%"),
                Binding("g", "flat", "GPU curve on/off"), Binding("m", "measure", "Measure again")]
    DEFAULT_CSS = """
    CostsScreen #why { padding: 0 1; height: auto; }
    CostsScreen #plots { height: 1fr; }
    """

    def __init__(self, accept: list[float], turns: list[MeasuredTurn], k: int, drafter: str,
                 engine: SpeculativeEngine | None = None, costs: Costs | None = None) -> None:
        """`accept`: acceptance per draft position measured in this conversation (empty: none
        yet); `turns`: what its turns measured; `costs`: already measured, else timed on the
        `engine`'s models when the screen opens."""
        super().__init__()
        self.measured_accept, self.turns, self.k, self.drafter = accept, turns, k, drafter
        self.engine, self.costs = engine, costs
        self.shift = 0
        self.flat = False
        self.busy = ""

    def compose(self) -> ComposeResult:
        yield Static("timing this machine's verify passes at the conversation's depth…", id="why")
        with Horizontal(id="plots"):
            yield PlotextPlot(id="verify")
            yield PlotextPlot(id="speedup")
        yield Footer()

    def on_mount(self) -> None:
        if self.costs is None:
            self.measure()
        else:
            self.replot()

    @work(thread=True, exclusive=True, group="costs")
    def measure(self) -> None:
        if self.engine is None:
            self.post_message(CostsMeasured(None, "no models loaded (a replay has none)"))
            return
        try:
            start = cpu.sample()
            engine = self.engine  # timed on the model thread whole: no pass handed over
            costs = model_thread.call(lambda: ModelKeeper.measure_costs(engine))
            busy = cpu.busy_note(cpu.others_share(start, cpu.sample()), "this timing")
            self.post_message(CostsMeasured(costs, busy=busy))
        except (SpecchatError, ValueError) as exc:
            self.post_message(CostsMeasured(None, str(exc)))

    def on_costs_measured(self, message: CostsMeasured) -> None:
        if message.costs is None:
            self.query_one("#why", Static).update(f"could not time this machine: {message.error}")
            return
        self.costs, self.busy = message.costs, message.busy
        self.replot()

    @property
    def accept(self) -> list[float]:
        """The acceptance per position the plots use: measured, moved by the what-if keys."""
        base = self.measured_accept or [DEFAULT_ACCEPT]
        base = base + [base[-1]] * (K_MAX - len(base))
        return [min(1.0, max(0.0, a + self.shift * STEP)) for a in base[:K_MAX]]

    def action_accept(self, direction: int) -> None:
        self.shift += direction
        self.replot()

    def action_flat(self) -> None:
        self.flat = not self.flat
        self.replot()

    def action_measure(self) -> None:
        self.query_one("#why", Static).update("timing again…")
        self.measure()

    def replot(self) -> None:
        if self.costs is None:
            return
        here = self.costs
        shown = here.flat() if self.flat else here
        accept = self.accept
        ns = list(range(1, len(here.verify) + 1))
        verify = self.query_one("#verify", PlotextPlot)
        plt = verify.plt
        plt.clear_data()
        plt.clear_figure()
        plt.plot(ns, [here.steps(n) for n in ns], label="this machine", marker="braille")
        plt.plot(ns, [here.flat().steps(n) for n in ns], label="a GPU's shape", marker="braille")
        plt.title("verifying n tokens, in target steps")
        plt.xlabel("n tokens verified at once")
        verify.refresh()
        ks = list(range(0, K_MAX + 1))
        chart = self.query_one("#speedup", PlotextPlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        if here.draft > 0:
            plt.plot(ks, [speedup(shown, accept, k) for k in ks], label=f"draft {self.drafter}",
                     marker="braille")
        plt.plot(ks, [speedup(shown.free_drafter(), accept, k) for k in ks],
                 label="a free drafter (n-gram)", marker="braille")
        plt.plot(ks, [1.0] * len(ks), label="break-even", marker="dot")
        rungs = [n for n, even in guarded_rungs(shown, self.k) if even is not None]
        if rungs and here.draft > 0:
            plt.scatter(rungs, [1.0] * len(rungs), marker="o",
                        label="guarded (default): steps down below break-even here")
        if self.turns and not self.flat:
            plt.scatter([t.k for t in self.turns], [t.speedup for t in self.turns],
                        label="your turns (measured)", marker="x")
        curve = "a GPU's flat curve (what-if)" if self.flat else "this machine"
        plt.title(f"expected speedup against k, {curve}")
        plt.xlabel("k, tokens drafted a round")
        chart.refresh()
        self.query_one("#why", Static).update(self.words(shown, accept))

    def words(self, costs: Costs, accept: list[float]) -> str:
        """The lesson with this machine's numbers (and the what-if's, when they are moved)."""
        k = max(1, self.k)
        here = self.costs or costs
        how = ("measured in this conversation" if self.measured_accept else
               f"none measured yet: {DEFAULT_ACCEPT:.0%}")
        if self.shift:
            how += f", moved {self.shift * STEP:+.0%} (what-if)"
        pass_cost = (f"one pass of the draft {costs.draft_steps:.2f} of a step" if costs.draft
                     else "the drafter (n-gram lookup) costs nothing")
        warning = [f"[b]{self.busy[:1].upper() + self.busy[1:]} (M times it again)[/b]"] \
            if self.busy else []
        spread = costs.steps_spread(4)
        plus = f" (±{spread / 2:.2f}: the middle half of {COST_REPEATS} interleaved timings)" \
            if spread is not None else ""
        noisy = costs.unresolved(k + 1)
        noise = (f" The timings of {', '.join(map(str, noisy))} tokens spread wider than the "
                 "step to the next size: there the curve is within its noise (M times again)."
                 if noisy else "")
        lines = warning + [f"[b]Why here[/b]  A target step takes {here.verify[0]:.0f} ms "
                 f"(depth {here.depth}). Verifying 4 tokens costs {costs.steps(4):.2f}{plus} "
                 f"target steps{' on a GPU-shaped curve' if self.flat else ' here'}, and "
                 f"{pass_cost}.{noise}"]
        even = break_even(costs, k)
        if even is None:
            lines.append(f"At k={k} even a draft that is always right would not pay: a round "
                         f"costs {costs.steps(k + 1) + k * costs.draft_steps:.1f} steps for at "
                         f"most {k + 1} tokens.")
        else:
            lines.append(f"So at k={k} a draft must be accepted {even:.0%} of the time (at every "
                         f"position) just to break even.")
        lines.append(guarded_words(costs, k))
        best, gain = best_k(costs, accept, K_MAX)
        free_k, free_gain = best_k(costs.free_drafter(), accept, K_MAX)
        best_text = (f"best k={best}: {gain:.2f}x" if best else
                     "no k pays with this draft, so drafting nothing is best (1.00x)")
        lines.append(f"Acceptance by position ({how}): "
                     + " ".join(f"{a:.0%}" for a in accept[:k])
                     + f" → expected {speedup(costs, accept, k):.2f}x at k={k}; {best_text}; "
                       f"a free drafter (n-gram) {free_gain:.2f}x at k={free_k}.")
        checks = [c for c in (check_turn(here, t) for t in self.turns[-4:]) if c]
        if checks and not self.flat:
            lines.append("Your last turns, the curve's prediction for the rounds they ran against "
                         "what they measured: " + "; ".join(
                             f"k={c.k} {c.predicted:.2f}x → {c.measured:.2f}x"
                             + (f" ({c.off:+.0%}, left out: {c.left_out})" if c.left_out else "")
                             for c in checks) + ".")
        if not self.flat:
            flat_k, flat_gain = best_k(costs.flat(), accept, K_MAX)
            lines.append(f"On a GPU, where 8 tokens cost {costs.flat().steps(8):.2f} steps, the "
                         f"same drafts would give {flat_gain:.2f}x at k={flat_k} (G shows it). "
                         "`specchat tune` measures every drafter and k here and recommends one.")
        if here.draft > 0:
            lines.append(self.tree_words(costs, accept, k))
        return "\n".join(lines)

    def tree_words(self, costs: Costs, accept: list[float], k: int) -> str:
        """What a draft tree would buy at this k, here and on a GPU's curve."""
        measured = branch_stands(r for t in self.turns for r in t.rounds)
        stands, how = ((measured[0], f"measured over {measured[1]} tested in this conversation")
                       if measured else (ALT_STANDS, "a what-if: none tested yet, --tree tests them"))
        rows = costs.steps(2 * k + 1) - costs.steps(k + 1)
        return (f"A draft tree, one alternative beside each of k={k} draft tokens (an "
                f"alternative the target's choice in {stands:.0%} of refusals, {how}): "
                f"{tree_speedup(costs, accept, k, stands):.2f}x against the chain's "
                f"{speedup(costs, accept, k):.2f}x here, where its {k} more rows cost "
                f"{rows:.2f} steps; on a GPU's curve "
                f"{tree_speedup(costs.flat(), accept, k, stands):.2f}x against "
                f"{speedup(costs.flat(), accept, k):.2f}x.")
