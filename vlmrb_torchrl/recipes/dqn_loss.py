"""Double DQN's loss on plain tensors: TorchRL's ``DQNLoss(double_dqn=True)`` without its per-call overhead."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from torch import nn

__all__ = ["DoubleDQNLoss"]


class DoubleDQNLoss(nn.Module):
    """Double DQN with a hard-copied target network, on a replay sample's tensors.

    Computes what ``torchrl.objectives.DQNLoss(value_network, delay_value=True, double_dqn=True,
    loss_function="smooth_l1")`` with a TD(0) estimator computes (``tests/test_recipes.py``
    checks the loss, its gradients and the TD errors against it):

    - ``q = Q(s)[a]``; the next action ``a' = argmax Q(s')`` from the online network; the
      target ``y = r + gamma ** n * (1 - terminated) * Q_target(s')[a']`` with ``n`` the sample's
      ``"steps_to_next_obs"`` (n-step returns; 1 when absent);
    - the loss: the smooth-L1 (Huber) distance of ``q`` and ``y``, averaged over the batch, or
      weighted by ``"priority_weight"`` (``sum(w * l) / sum(w)``) when the sample has importance
      weights (PER, VLM-RB with ``vlm_beta > 0``) and ``importance_weights`` is on;
    - the priority ``(q - y) ** 2`` written to the sample's ``"td_error"`` (what TorchRL's
      prioritized samplers and the ``vlm_td`` boost read), unless ``td_error=False``.

    ``DQNLoss`` swaps parameters into a functional copy of the network three times per call
    and wraps every intermediate in a TensorDict, which costs ~5 ms per update on a CPU: several
    times the network's own arithmetic for a 2x256 MLP. Here the network is called on tensors,
    and the two forward passes that need no gradient (online and target on ``s'``) run under
    ``no_grad``.

    Args:
        value_network (nn.Module): observations ``[B, *obs]`` -> Q-values ``[B, n_actions]``
            (the module inside the policy's ``QValueActor``: the parameters are shared).

    Keyword Args:
        gamma (float): discount.
        observation_key (str): the observation entry (and ``("next", key)``). Defaults to
            ``"observation"``.
        td_error (bool): write ``sample["td_error"]``; replay without TD-error priorities (uniform,
            ``vlm``) does not read it. Defaults to ``True``.
        importance_weights (bool): weight the loss by the sample's ``"priority_weight"``. ``False``
            averages over the batch and ignores them: for a sampler whose weights are all ones
            (``VLMPrioritizedSampler(beta=0)``, the paper's setting), where the plain average is the
            same number, bit for bit, with its gradients, and skips the weighting's tensor operations.
            Defaults to ``True``.

    The target network is a copy made at construction; :meth:`update_target` copies the
    online parameters into it (the recipe calls it every ``target_update`` updates).

    Examples:
        >>> from tensordict import TensorDict
        >>> torch.manual_seed(0)
        <torch._C.Generator object at ...>
        >>> loss = DoubleDQNLoss(nn.Linear(4, 2), gamma=0.99)
        >>> sample = TensorDict({"observation": torch.randn(8, 4), "action": torch.randint(2, (8,)),
        ...                      ("next", "observation"): torch.randn(8, 4), ("next", "reward"): torch.ones(8, 1),
        ...                      ("next", "terminated"): torch.zeros(8, 1, dtype=torch.bool)}, [8])
        >>> value = loss(sample)
        >>> value.shape, sample["td_error"].shape
        (torch.Size([]), torch.Size([8, 1]))
    """

    def __init__(self, value_network: nn.Module, *, gamma: float, observation_key: str = "observation",
                 td_error: bool = True, importance_weights: bool = True) -> None:
        super().__init__()
        self.td_error = td_error
        self.importance_weights = importance_weights
        self.value_network = value_network
        self.target_network = copy.deepcopy(value_network).requires_grad_(False)
        self.gamma = float(gamma)
        self.observation_key = observation_key

    @torch.no_grad()
    def update_target(self) -> None:
        """Hard update: the target network's parameters (and buffers) become the online ones."""
        for target, online in zip(self.target_network.state_dict().values(), self.value_network.state_dict().values()):
            target.copy_(online)

    def forward(self, sample: TensorDictBase) -> torch.Tensor:
        """The loss of ``sample`` (a scalar to backpropagate); writes ``sample["td_error"]`` (``[B, 1]``) when
        ``td_error``."""
        obs = sample.get(self.observation_key)
        next_obs = sample.get(("next", self.observation_key))
        action = sample.get("action")
        if action.ndim > 1:  # [B, 1]
            action = action.squeeze(-1)
        reward = sample.get(("next", "reward")).reshape(-1)
        terminated = sample.get(("next", "terminated"), None)
        if terminated is None:
            terminated = sample.get(("next", "done"))
        terminated = terminated.reshape(-1)

        q = self.value_network(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_action = self.value_network(next_obs).argmax(-1, keepdim=True)
            next_q = self.target_network(next_obs).gather(-1, next_action).squeeze(-1)
            steps = sample.get("steps_to_next_obs", None)
            discount = self.gamma if steps is None else self.gamma ** steps.reshape(-1).to(next_q.dtype)
            target = reward + discount * (~terminated).to(next_q.dtype) * next_q
            if self.td_error:
                sample.set("td_error", (q - target).pow(2).unsqueeze(-1))  # [B, 1], as DQNLoss
        elementwise = F.smooth_l1_loss(q, target, reduction="none")
        weight = sample.get("priority_weight", None) if self.importance_weights else None
        if weight is None:
            return elementwise.mean()
        weight = weight.reshape(-1).to(elementwise.dtype)
        return (elementwise * weight).sum() / weight.sum()
