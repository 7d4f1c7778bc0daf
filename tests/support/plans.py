"""Plans a test hands a drafter directly, to see what the drafter does with each answer."""

from __future__ import annotations


class PassesFor:
    """A plan that keeps every token up to `k` but finds a pass worth running only for the
    first `worth` tokens."""

    declined = False
    width, p_branch = 1, 0.0

    def __init__(self, k: int, worth: int) -> None:
        self.asked, self.worth = k, worth

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        return self.asked

    def keep(self, source: str, i: int, conf: float) -> bool:
        return True

    def worth_a_pass(self, source: str, i: int) -> bool:
        return i < self.worth
