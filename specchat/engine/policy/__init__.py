"""Draft-length policies: how much to draft each round, and when to stop drafting early.

On a CPU a verify batch of k+1 tokens costs well over one target step and a draft pass is not
free, so speculation wins or loses by how much it drafts. `CostModel` (cost_model.py) learns
while the engine runs what this machine charges (machine.py), how often each draft source is
right (acceptance.py) and where the reply is (reply.py), and predicts every round's tokens and
seconds. `FixedPolicy` (fixed.py) drafts k tokens and stops below a confidence `p_min`
(llama.cpp's settings); `GuardedPolicy` (guarded.py) does so while it beats plain steps here,
and steps down to 1 token or none where it does not; `AdaptivePolicy` (adaptive.py) picks the
length that pays best, or none. Both probe now and then (schedule.py). docs/lab/ holds the
measurements behind the rules.
"""

from specchat.engine.policy.adaptive import AdaptivePolicy
from specchat.engine.policy.base import Policy, Prediction, Seen
from specchat.engine.policy.branching import TreeSettings
from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.fixed import FixedPolicy
from specchat.engine.policy.guarded import GuardedPolicy
from specchat.engine.policy.kind import PolicyKind
from specchat.engine.policy.machine import MachineCosts
from specchat.engine.policy.rates import expected_tokens

__all__ = ["AdaptivePolicy", "CostModel", "FixedPolicy", "GuardedPolicy", "MachineCosts", "Policy",
           "PolicyKind", "Prediction", "Seen", "TreeSettings", "expected_tokens"]
