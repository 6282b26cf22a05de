"""A warning for SAC critics that hold values no Bellman backup of the replayed rewards can produce."""

from __future__ import annotations

import math

import torch

__all__ = ["SoftValueCeiling"]


class SoftValueCeiling:
    """The largest soft Q-value the replayed rewards can back up, and a message once the critics exceed it.

    A soft Q-value is a discounted sum of rewards plus ``alpha`` times the policy's entropy. With every
    stored reward ``<= r_max``, discount ``gamma`` and temperature ``alpha``, no Bellman backup of the
    replayed data can give more than ``(r_max + alpha * max_entropy) / (1 - gamma)``, where
    ``max_entropy`` is the largest entropy of an action distribution on the action box (the uniform
    one's: ``sum(log(high - low))``, ``A log 2`` on ``[-1, 1]^A``). ``r_max`` is taken as at least 0:
    critics start near 0 and come down to the values of negative rewards slowly (on Scene, rewards
    -5 .. -1, uniform SAC's critics were still at ~-11 after 10k updates), which is not divergence.
    Critics whose batch mean
    (``q_value``) stays above that ceiling by more than ``tolerance * max(|r_min|, |r_max|, 1) / (1 -
    gamma)`` for ``patience`` checks in a row are diverging — as SAC's did on OGBench Scene under the
    paper's uncapped, TD-boosted VLM-RB sampler (``studies/results.md``), while ``alpha`` climbed with
    them. There is no such floor: the entropy has no lower bound.

    Keyword Args:
        gamma (float): the discount.
        max_entropy (float): the largest entropy of an action distribution (see above).
        tolerance (float): the margin above the ceiling, in units of the largest reward magnitude
            seen (at least 1) over ``1 - gamma``. Defaults to ``0.1``.
        patience (int): checks in a row above it before :meth:`check` reports. Defaults to ``3``.

    Examples:
        >>> ceiling = SoftValueCeiling(gamma=0.99, max_entropy=5 * math.log(2))
        >>> ceiling.observe(torch.tensor([-5.0, -1.0, 0.0]))
        >>> round(ceiling.ceiling(alpha=0.01), 3)  # (0 + 0.01 * 5 log 2) / 0.01
        3.466
        >>> [ceiling.check(q, alpha=0.01, env_steps=s) is None for s, q in enumerate([-90.0, 60.0, 60.0])]
        [True, True, True]
        >>> print(ceiling.check(60.0, alpha=0.01, env_steps=3))  # doctest: +ELLIPSIS
        the critics' mean Q-value 60 has been above 53.5 ... for 3 checks in a row at 3 frames: ...
        >>> ceiling.exceeded_at, ceiling.check(60.0, alpha=0.01, env_steps=4)  # reported once
        (3, None)
    """

    def __init__(self, *, gamma: float, max_entropy: float, tolerance: float = 0.1, patience: int = 3) -> None:
        if not 0 <= gamma < 1:
            raise ValueError(f"SoftValueCeiling: gamma must be in [0, 1), got {gamma}.")
        if tolerance < 0 or patience < 1:
            raise ValueError(f"SoftValueCeiling: tolerance must be >= 0 and patience >= 1, got {tolerance}, {patience}.")
        self.gamma = float(gamma)
        self.max_entropy = float(max_entropy)
        self.tolerance = float(tolerance)
        self.patience = int(patience)
        self.reward_min = math.inf
        self.reward_max = -math.inf
        self.exceeded_at: int | None = None
        self._streak = 0

    #: a run's checkpoints from before it was saved with them resume without it (it starts afresh)
    checkpoint_optional = True

    def state_dict(self) -> dict:
        """The rewards seen, the streak and when it reported: saved with a run's checkpoints, so that a resumed
        run's ceiling still knows the rewards already in its buffer, and its ``summary.json`` still says when the
        critics diverged before the resume.

        Examples:
            >>> ceiling = SoftValueCeiling(gamma=0.99, max_entropy=1.0)
            >>> ceiling.observe(torch.tensor([-5.0, -1.0]))
            >>> again = SoftValueCeiling(gamma=0.99, max_entropy=1.0)
            >>> again.load_state_dict(ceiling.state_dict())
            >>> again.reward_min, again.reward_max, again.exceeded_at
            (-5.0, -1.0, None)
        """
        return {"reward_min": self.reward_min, "reward_max": self.reward_max, "exceeded_at": self.exceeded_at,
                "streak": self._streak}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.reward_min, self.reward_max = float(state["reward_min"]), float(state["reward_max"])
        self.exceeded_at = None if state["exceeded_at"] is None else int(state["exceeded_at"])
        self._streak = int(state["streak"])

    def observe(self, reward: torch.Tensor) -> None:
        """Takes in the rewards of newly stored transitions (non-finite ones are left out)."""
        reward = reward.detach().reshape(-1)
        reward = reward[torch.isfinite(reward)]
        if reward.numel():
            self.reward_min = min(self.reward_min, float(reward.min()))
            self.reward_max = max(self.reward_max, float(reward.max()))

    def ceiling(self, alpha: float) -> float:
        """``(max(r_max, 0) + alpha * max_entropy) / (1 - gamma)`` (``inf`` before any reward is observed)."""
        if self.reward_max == -math.inf:
            return math.inf
        return (max(self.reward_max, 0.0) + float(alpha) * self.max_entropy) / (1 - self.gamma)

    def margin(self) -> float:
        """How far above the ceiling a batch mean may be before it counts."""
        scale = max(abs(self.reward_min), abs(self.reward_max), 1.0) if self.reward_max > -math.inf else 1.0
        return self.tolerance * scale / (1 - self.gamma)

    def check(self, q_value: float, *, alpha: float, env_steps: int) -> str | None:
        """Counts a batch mean above the ceiling (plus the margin); returns a message the first time
        ``patience`` of them came in a row (``None`` otherwise, and after that)."""
        limit = self.ceiling(alpha) + self.margin()
        above = math.isfinite(float(q_value)) and float(q_value) > limit
        self._streak = self._streak + 1 if above else 0
        if self._streak < self.patience or self.exceeded_at is not None:
            return None
        self.exceeded_at = int(env_steps)
        return (f"the critics' mean Q-value {float(q_value):.3g} has been above {limit:.3g} (what the replayed "
                f"rewards <= {self.reward_max:.3g} can back up with gamma={self.gamma:g}, alpha={float(alpha):.3g}, "
                f"plus a margin) for {self.patience} checks in a row at {int(env_steps)} frames: the critics are "
                f"diverging. Prioritised replay without an over-sampling ceiling does this (max_oversampling=4, the "
                f"recipe's default, bounds it; vlm_beta > 0 corrects the sampling); see docs/sac.md.")
