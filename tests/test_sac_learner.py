"""The SAC recipe's learner: EnsembleMLP == separate MLPs, SACLearner == TorchRL's SACLoss + SoftUpdate."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Bounded
from torchrl.modules import MLP, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate

from vlmrb_torchrl.modules import EnsembleMLP
from vlmrb_torchrl.recipes.sac import make_actor, make_critic
from vlmrb_torchrl.recipes.sac_loss import SACLearner

OBS, ACT, HIDDEN, BATCH = 11, 3, 32, 64


class TestEnsembleMLP:
    def test_equals_its_members_forward_and_backward(self):
        torch.manual_seed(0)
        mlps = [MLP(in_features=OBS, out_features=2, num_cells=[HIDDEN, HIDDEN], activation_class=nn.ReLU)
                for _ in range(3)]
        ensemble = EnsembleMLP.from_mlps(mlps)
        x = torch.randn(BATCH, OBS)
        upstream = torch.randn(3, BATCH, 2)
        (ensemble(x) * upstream).sum().backward()
        sum((mlp(x) * upstream[i]).sum() for i, mlp in enumerate(mlps)).backward()
        out = ensemble(x)
        for i, mlp in enumerate(mlps):
            torch.testing.assert_close(out[i], mlp(x), rtol=1e-6, atol=1e-6)
            linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
            for depth, (weight, bias) in enumerate(ensemble.layers()):
                torch.testing.assert_close(weight.grad[i], linears[depth].weight.grad.t(), rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(bias.grad[i, 0], linears[depth].bias.grad, rtol=1e-5, atol=1e-6)
        # one batch per member
        xs = torch.randn(3, BATCH, OBS)
        torch.testing.assert_close(ensemble(xs), torch.stack([mlp(xs[i]) for i, mlp in enumerate(mlps)]),
                                   rtol=1e-6, atol=1e-6)

    def test_a_seeded_build_draws_nn_linear_s_weights(self):
        torch.manual_seed(4)
        members = [[nn.Linear(OBS, HIDDEN), nn.Linear(HIDDEN, 1)] for _ in range(2)]
        torch.manual_seed(4)
        ensemble = EnsembleMLP(OBS, 1, [HIDDEN], n=2)
        for i, layers in enumerate(members):
            for (weight, bias), linear in zip(ensemble.layers(), layers):
                assert torch.equal(weight[i], linear.weight.t()) and torch.equal(bias[i, 0], linear.bias)

    def test_detach_keeps_gradients_off_the_parameters(self):
        ensemble = EnsembleMLP(OBS, 1, [HIDDEN])
        x = torch.randn(4, OBS, requires_grad=True)
        ensemble(x, detach=True).sum().backward()
        assert x.grad is not None and all(p.grad is None for p in ensemble.parameters())

    def test_mismatched_members_are_refused(self):
        with pytest.raises(ValueError, match="same shapes"):
            EnsembleMLP.from_mlps([nn.Linear(3, 4), nn.Linear(3, 5)])


def replay_sample(batch: int, *, weights: bool, generator: torch.Generator, low=-1.0, high=1.0) -> TensorDict:
    """A sample as the recipe's replay returns it (importance weights as PER and VLM-RB give them)."""
    data = {
        "observation": torch.randn(batch, OBS, generator=generator),
        "action": low + (high - low) * torch.rand(batch, ACT, generator=generator),
        ("next", "observation"): torch.randn(batch, OBS, generator=generator),
        ("next", "reward"): torch.randn(batch, 1, generator=generator),
        ("next", "terminated"): torch.rand(batch, 1, generator=generator) < 0.2,
    }
    data[("next", "done")] = data[("next", "terminated")] | (torch.rand(batch, 1, generator=generator) < 0.1)
    if weights:
        data["priority_weight"] = torch.rand(batch, generator=generator) + 0.1
    return TensorDict(data, [batch])


def build(low: float = -1.0, high: float = 1.0, *, alpha_init: float = 0.7, gamma: float = 0.97, tau: float = 0.05):
    """TorchRL's SACLoss and a SACLearner on the same actor, critic and target critic weights."""
    torch.manual_seed(0)
    spec = Bounded(low, high, shape=(ACT,))
    actor = make_actor(OBS, spec, HIDDEN)
    critic = ValueOperator(make_critic(OBS, ACT, HIDDEN), in_keys=["action", "observation"])
    reference = SACLoss(actor, critic, num_qvalue_nets=2, loss_function="l2", delay_actor=False,
                        delay_qvalue=True, alpha_init=alpha_init, action_spec=spec)
    reference.make_value_estimator(gamma=gamma)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # twin critics that differ, and target critics that differ from them
        for p in reference.qvalue_network_params.values(True, True):
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
        for p in reference.target_qvalue_network_params.values(True, True):
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    learner = SACLearner(actor.module[0].module, EnsembleMLP(ACT + OBS, 1, [HIDDEN, HIDDEN]),
                         action_low=spec.space.low, action_high=spec.space.high, gamma=gamma, tau=tau,
                         alpha_init=alpha_init)
    copy_critics(reference.qvalue_network_params, learner.critic)
    copy_critics(reference.target_qvalue_network_params, learner.target_critic)
    return reference, learner


def copy_critics(params, ensemble: EnsembleMLP) -> None:
    """SACLoss's stacked ValueOperator(MLP) parameters ([2, out, in] weights) into the ensemble ([2, in, out])."""
    mlp = params["module"]
    with torch.no_grad():
        for depth, (weight, bias) in enumerate(ensemble.layers()):
            weight.copy_(mlp[str(2 * depth), "weight"].transpose(1, 2))
            bias.copy_(mlp[str(2 * depth), "bias"].unsqueeze(1))


def critic_grads(params) -> list[torch.Tensor]:
    """The gradients of SACLoss's stacked critics in the ensemble's layout (MLP: Linear layers at 0, 2, 4)."""
    mlp = params["module"]
    return [g for d in ("0", "2", "4")
            for g in (mlp[d, "weight"].grad.transpose(1, 2), mlp[d, "bias"].grad.unsqueeze(1))]


@pytest.mark.filterwarnings("ignore:No target network updater")
class TestSACLearner:
    @pytest.mark.parametrize("weights", [False, True])
    @pytest.mark.parametrize("bounds", [(-1.0, 1.0), (-2.0, 0.5)])
    def test_equals_torchrl_sac_loss(self, weights, bounds):
        reference, learner = build(*bounds)
        sample_ref = replay_sample(BATCH, weights=weights, generator=torch.Generator().manual_seed(2),
                                   low=bounds[0], high=bounds[1])
        sample = sample_ref.clone()

        torch.manual_seed(5)  # the same noise draws: target actions first, then the actor's
        expected = reference(sample_ref)
        (expected["loss_actor"] + expected["loss_qvalue"] + expected["loss_alpha"]).backward()
        actor_grads = [p.grad.clone() for p in learner.actor.parameters()]
        q_grads = critic_grads(reference.qvalue_network_params)
        alpha_grad = reference.log_alpha.grad.clone()
        learner.actor.zero_grad()

        torch.manual_seed(5)
        losses = learner.losses(sample)
        (losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]).backward()
        for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
            torch.testing.assert_close(losses[key], expected[key], rtol=1e-5, atol=1e-6, msg=key)
        torch.testing.assert_close(sample["td_error"], sample_ref["td_error"], rtol=1e-5, atol=1e-6)
        for grad, grad_ref in zip((p.grad for p in learner.actor.parameters()), actor_grads, strict=True):
            torch.testing.assert_close(grad, grad_ref, rtol=1e-4, atol=1e-6)
        ours = [t for layer in learner.critic.layers() for t in (layer[0].grad, layer[1].grad)]
        for grad, grad_ref in zip(ours, q_grads, strict=True):
            torch.testing.assert_close(grad, grad_ref, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(learner.log_alpha.grad, alpha_grad, rtol=1e-5, atol=1e-7)

    def test_update_equals_torchrl_s_recipe_step(self):
        """Adam on the summed losses, then SoftUpdate: the same parameters after three steps."""
        reference, _ = build()  # two builds from one seed: the same weights, SACLoss's actor its own
        _, learner = build()
        ref_optim = torch.optim.Adam([
            {"params": list(reference.actor_network_params.flatten_keys().values()), "lr": 1e-3},
            {"params": list(reference.qvalue_network_params.flatten_keys().values()), "lr": 2e-3},
            {"params": [reference.log_alpha], "lr": 2e-3}])
        target_update = SoftUpdate(reference, tau=0.05)  # copies the critics into the targets, as the learner's build
        copy_critics(reference.target_qvalue_network_params, learner.target_critic)
        optim = learner.make_optimizer(policy_lr=1e-3, q_lr=2e-3)
        gen = torch.Generator().manual_seed(3)
        for step in range(3):
            sample = replay_sample(BATCH, weights=step == 1, generator=gen)
            torch.manual_seed(10 + step)
            out = reference(sample.clone())
            ref_optim.zero_grad()
            (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
            ref_optim.step()
            target_update.step()
            torch.manual_seed(10 + step)
            learner.update(sample, optim)
        # atol: Adam moves a parameter by ~lr whatever its gradient's size, so rounding-level differences in
        # near-zero gradients show up as differences of a small fraction of lr (1e-3) after a few steps
        for ours, theirs in zip(learner.actor.parameters(), reference.actor_network_params.flatten_keys().values()):
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
        ours = copy.deepcopy(learner.critic)
        for params, ensemble in ((reference.qvalue_network_params, learner.critic),
                                 (reference.target_qvalue_network_params, learner.target_critic)):
            copy_critics(params, ours)
            for a, b in zip(ours.parameters(), ensemble.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(learner.log_alpha, reference.log_alpha, rtol=1e-5, atol=1e-7)

    @pytest.mark.parametrize("batch", [256, 7, 100])
    def test_unweighted_equals_weights_of_one_bit_for_bit(self, batch):
        """``importance_weights=False`` (the recipe's VLM-RB with beta=0, whose weights are all ones): the
        same losses, gradients and parameters after two updates (actor_steps=2), bit for bit, as weighting by
        ones; other weights are then ignored."""
        gen = torch.Generator().manual_seed(batch)
        learners = [build()[1], build()[1]]  # one seed: the same weights
        learners[1].importance_weights = False
        optims = [learner.make_optimizer(policy_lr=1e-3, q_lr=2e-3) for learner in learners]
        for step in range(3):
            sample = replay_sample(batch, weights=False, generator=gen)
            sample["priority_weight"] = torch.ones(batch)  # what VLMPrioritizedSampler(beta=0) returns
            results = []
            for learner, optim in zip(learners, optims):
                torch.manual_seed(step)
                losses = learner.update(sample.clone(), optim, actor_steps=2)
                grads = [p.grad.clone() for p in learner.parameters() if p.grad is not None]
                results.append((losses, grads, [p.detach().clone() for p in learner.parameters()]))
            (losses_w, grads_w, params_w), (losses_p, grads_p, params_p) = results
            assert sorted(losses_w) == sorted(losses_p)
            assert all(torch.equal(losses_w[key], losses_p[key]) for key in losses_w)
            assert len(grads_w) == len(grads_p) > 0
            assert all(torch.equal(a, b) for a, b in zip(grads_w, grads_p, strict=True))
            assert all(torch.equal(a, b) for a, b in zip(params_w, params_p, strict=True))
        sample = replay_sample(batch, weights=True, generator=gen)
        torch.manual_seed(0)
        weighted_ignored = learners[1].losses(sample.clone())
        torch.manual_seed(0)
        unweighted = learners[1].losses(sample.exclude("priority_weight"))
        assert all(torch.equal(weighted_ignored[key], unweighted[key]) for key in unweighted)

    def test_q_value_is_the_batch_mean_of_the_critics_minimum(self):
        _, learner = build()
        sample = replay_sample(BATCH, weights=True, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            twin = learner.q_values(sample["observation"], sample["action"])
        assert not torch.equal(twin[0], twin[1])  # the build's twin critics differ: the minimum matters
        out = learner.losses(sample)
        torch.testing.assert_close(out["q_value"], twin.min(0).values.mean())
        assert not out["q_value"].requires_grad

    def test_policy_frequency_steps(self):
        """actor_steps=0 trains the critics only; actor_steps=k takes k actor and temperature steps."""
        _, learner = build()
        optim = learner.make_optimizer(policy_lr=1e-3, q_lr=1e-3)
        sample = replay_sample(BATCH, weights=False, generator=torch.Generator().manual_seed(0))
        actor_before = [p.clone() for p in learner.actor.parameters()]
        target_before = [p.clone() for p in learner.target_critic.parameters()]
        log_alpha = learner.log_alpha.detach().clone()
        out = learner.update(sample, optim, actor_steps=0)
        assert sorted(out) == ["alpha", "loss_qvalue", "q_value"]
        assert all(torch.equal(a, b) for a, b in zip(actor_before, learner.actor.parameters()))
        assert torch.equal(learner.log_alpha, log_alpha)
        assert not any(torch.equal(a, b) for a, b in zip(target_before, learner.target_critic.parameters()))
        learner.update(sample, optim, actor_steps=3)
        steps = lambda p: int(optim.state[p]["step"])  # noqa: E731
        assert steps(next(learner.actor.parameters())) == 3 and steps(learner.log_alpha) == 3
        assert steps(next(learner.critic.parameters())) == 2

    def test_soft_update_moves_tau_of_the_way(self):
        _, learner = build(tau=0.25)
        with torch.no_grad():
            for p in learner.critic.parameters():
                p.add_(1.0)
        before = [p.clone() for p in learner.target_critic.parameters()]
        learner.update_target()
        for old, new, online in zip(before, learner.target_critic.parameters(), learner.critic.parameters()):
            torch.testing.assert_close(new, 0.75 * old + 0.25 * online)
