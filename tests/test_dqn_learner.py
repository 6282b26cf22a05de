"""The DQN recipe's learner: OneHotLinear == nn.Linear on one-hot inputs, DoubleDQNLoss == TorchRL's DQNLoss."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Bounded, Categorical
from torchrl.modules import MLP, QValueActor
from torchrl.objectives import DQNLoss

from vlmrb_torchrl.modules import OneHotLinear
from vlmrb_torchrl.recipes.dqn import make_q_network
from vlmrb_torchrl.recipes.dqn_loss import DoubleDQNLoss

D, K, N_ACTIONS = 984, 148, 5


def random_positions(batch: int, *, generator: torch.Generator) -> torch.Tensor:
    """``[batch, K]`` distinct positions in ``[0, D)`` per row, int16 (what MiniGrid's observation='indices' writes)."""
    return torch.stack([torch.randperm(D, generator=generator)[:K] for _ in range(batch)]).to(torch.int16)


def one_hot(positions: torch.Tensor) -> torch.Tensor:
    return torch.zeros(*positions.shape[:-1], D).scatter_(-1, positions.long(), 1.0)


class TestOneHotLinear:
    def test_forward_and_gradients_equal_linear_on_the_one_hot_vector(self):
        gen = torch.Generator().manual_seed(0)
        linear = nn.Linear(D, 32)
        layer = OneHotLinear.from_linear(linear)
        positions = random_positions(64, generator=gen)
        upstream = torch.randn(64, 32, generator=gen)
        (layer(positions) * upstream).sum().backward()
        (linear(one_hot(positions)) * upstream).sum().backward()
        torch.testing.assert_close(layer(positions), linear(one_hot(positions)), rtol=0, atol=1e-5)
        torch.testing.assert_close(layer.weight.grad, linear.weight.grad.t(), rtol=0, atol=1e-5)
        torch.testing.assert_close(layer.bias.grad, linear.bias.grad)
        # leading batch dims, int32/int64 positions
        nested = positions.reshape(4, 16, K)
        torch.testing.assert_close(layer(nested.int()), layer(positions.long()).reshape(4, 16, 32))

    def test_padded_rows_equal_linear_on_their_one_hot_vectors(self):
        """Rows of different lengths, padded with -1 (MiniGrid's view='full'): the ragged path's output and
        gradients equal nn.Linear's on the one-hot vectors, empty rows included; only seen columns get gradient."""
        gen = torch.Generator().manual_seed(1)
        linear = nn.Linear(D, 32, dtype=torch.float64)
        layer = OneHotLinear.from_linear(linear)
        positions = torch.full((64, K), -1, dtype=torch.int16)
        for row, n in enumerate(torch.randint(0, K + 1, (64,), generator=gen).tolist()):
            positions[row, :n] = torch.randperm(D, generator=gen)[:n]
        positions[5] = -1  # a row without ones: the bias alone
        dense = torch.zeros(64, D, dtype=torch.float64)
        for row in range(64):
            dense[row, positions[row][positions[row] >= 0].long()] = 1.0
        upstream = torch.randn(64, 32, generator=gen, dtype=torch.float64)
        (layer(positions) * upstream).sum().backward()
        (linear(dense) * upstream).sum().backward()
        torch.testing.assert_close(layer(positions), linear(dense))
        torch.testing.assert_close(layer(positions)[5], linear.bias)
        torch.testing.assert_close(layer.weight.grad, linear.weight.grad.t())
        torch.testing.assert_close(layer.bias.grad, linear.bias.grad)
        unseen = torch.ones(D, dtype=torch.bool)
        unseen[positions[positions >= 0].long()] = False
        assert unseen.any() and (layer.weight.grad[unseen] == 0).all()
        with torch.no_grad():  # the no-autograd path (acting, targets)
            torch.testing.assert_close(layer(positions), linear(dense))

    def test_a_seeded_build_draws_nn_linear_s_weights(self):
        torch.manual_seed(3)
        linear = nn.Linear(D, 16)
        torch.manual_seed(3)
        layer = OneHotLinear(D, 16)
        assert torch.equal(layer.weight, linear.weight.t()) and torch.equal(layer.bias, linear.bias)
        state = torch.get_rng_state()
        OneHotLinear.from_linear(linear)  # copies, draws nothing
        assert torch.equal(torch.get_rng_state(), state)

    def test_float_input_is_refused(self):
        with pytest.raises(TypeError, match="integer positions of the ones"):
            OneHotLinear(D, 4)(torch.zeros(2, D))


class TestQNetwork:
    def test_index_observations_get_the_one_hot_mlp_with_the_same_init(self):
        torch.manual_seed(0)
        dense = make_q_network(Bounded(0.0, 1.0, shape=(D,)), N_ACTIONS, 64)
        torch.manual_seed(0)
        sparse = make_q_network(Bounded(0, D - 1, shape=(K,), dtype=torch.int16), N_ACTIONS, 64)
        assert isinstance(sparse[0], OneHotLinear) and isinstance(dense[0], nn.Linear)
        positions = random_positions(8, generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(sparse(positions), dense(one_hot(positions)), rtol=0, atol=1e-5)

    def test_padded_index_observations_size_the_layer_from_the_spec(self):
        # MiniGrid's view='full' with indices: Bounded(-1, D - 1), padded with -1
        net = make_q_network(Bounded(-1, D - 1, shape=(K,), dtype=torch.int16), N_ACTIONS, 64)
        assert isinstance(net[0], OneHotLinear) and net[0].in_features == D


def replay_sample(batch: int, *, weights: bool, generator: torch.Generator) -> TensorDict:
    """A sample as the recipe's replay returns it: positions, n-step counts, terminations, IS weights."""
    data = {
        "observation": random_positions(batch, generator=generator),
        "action": torch.randint(N_ACTIONS, (batch,), generator=generator),
        "steps_to_next_obs": torch.randint(1, 4, (batch,), generator=generator),
        ("next", "observation"): random_positions(batch, generator=generator),
        ("next", "reward"): torch.rand(batch, 1, generator=generator) * (torch.rand(batch, 1, generator=generator) < 0.3),
        ("next", "terminated"): torch.rand(batch, 1, generator=generator) < 0.2,
    }
    data[("next", "done")] = data[("next", "terminated")] | (torch.rand(batch, 1, generator=generator) < 0.1)
    if weights:
        data["priority_weight"] = torch.rand(batch, generator=generator) + 0.1
    return TensorDict(data, [batch])


@pytest.mark.filterwarnings("ignore:No target network updater")
class TestDoubleDQNLoss:
    @pytest.mark.parametrize("weights", [False, True])
    def test_equals_torchrl_dqn_loss(self, weights):
        gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        network = make_q_network(Bounded(0, D - 1, shape=(K,), dtype=torch.int16), N_ACTIONS, 64)
        spec = Categorical(N_ACTIONS)
        reference = DQNLoss(QValueActor(network, in_keys=["observation"], spec=spec), action_space=spec,
                            delay_value=True, double_dqn=True, loss_function="smooth_l1")
        reference.make_value_estimator(gamma=0.97)
        ours = DoubleDQNLoss(network, gamma=0.97)
        # a target network that differs from the online one, the same in both losses
        with torch.no_grad():
            for p in reference.target_value_network_params.values(True, True):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
            for (name, p), q in zip(ours.target_network.named_parameters(),
                                    reference.target_value_network_params.values(True, True)):
                p.copy_(q if q.shape == p.shape else q.t())
        sample_ref = replay_sample(64, weights=weights, generator=gen)
        sample = sample_ref.clone()

        expected = reference(sample_ref)["loss"]
        expected.backward()
        grads_ref = [p.grad.clone() for p in network.parameters()]
        network.zero_grad()
        value = ours(sample)
        value.backward()
        torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-7)
        for grad, grad_ref in zip((p.grad for p in network.parameters()), grads_ref):
            torch.testing.assert_close(grad, grad_ref, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(sample["td_error"], sample_ref["td_error"], rtol=1e-6, atol=1e-7)

    @pytest.mark.parametrize("batch", [64, 7, 100, 256])
    def test_unweighted_equals_weights_of_one_bit_for_bit(self, batch):
        """``importance_weights=False`` (the recipe's VLM-RB with beta=0, whose weights are all ones): the
        same loss and gradients, bit for bit, as weighting by ones; other weights are ignored."""
        gen = torch.Generator().manual_seed(batch)
        torch.manual_seed(1)
        network = make_q_network(Bounded(0, D - 1, shape=(K,), dtype=torch.int16), N_ACTIONS, 64)
        weighted, plain = DoubleDQNLoss(network, gamma=0.97), DoubleDQNLoss(network, gamma=0.97, importance_weights=False)
        plain.target_network.load_state_dict(weighted.target_network.state_dict())
        for _ in range(5):
            sample = replay_sample(batch, weights=False, generator=gen)
            sample["priority_weight"] = torch.ones(batch)  # what VLMPrioritizedSampler(beta=0) returns
            results = []
            for loss in (weighted, plain):
                network.zero_grad()
                value = loss(sample.clone())
                value.backward()
                results.append((value.detach(), [p.grad.clone() for p in network.parameters()]))
            (value_w, grads_w), (value_p, grads_p) = results
            assert torch.equal(value_w, value_p)
            assert all(torch.equal(a, b) for a, b in zip(grads_w, grads_p, strict=True))
            with torch.no_grad():  # the next round at other parameters
                for p in network.parameters():
                    p.add_(0.01 * torch.randn(p.shape, generator=gen))
        sample["priority_weight"] = torch.rand(batch, generator=gen)
        assert torch.equal(plain(sample.clone()), plain(sample.exclude("priority_weight")))

    def test_target_is_a_frozen_copy_until_updated(self):
        network = nn.Linear(4, 2)
        loss = DoubleDQNLoss(network, gamma=0.9)
        assert all(not p.requires_grad for p in loss.target_network.parameters())
        with torch.no_grad():
            network.weight.add_(1.0)
        assert not torch.equal(loss.target_network.weight, network.weight)
        loss.update_target()
        assert torch.equal(loss.target_network.weight, network.weight)
        # terminated transitions do not bootstrap: y = r
        sample = TensorDict({"observation": torch.randn(3, 4), "action": torch.zeros(3, dtype=torch.long),
                             ("next", "observation"): torch.randn(3, 4), ("next", "reward"): torch.ones(3, 1),
                             ("next", "terminated"): torch.ones(3, 1, dtype=torch.bool)}, [3])
        loss(sample)
        q = network(sample["observation"])[:, 0]
        torch.testing.assert_close(sample["td_error"].squeeze(-1), (q - 1.0).pow(2).detach())


def test_linear_egreedy_follows_torchrl_s_schedule():
    from torchrl.modules import EGreedyModule

    from vlmrb_torchrl.recipes.dqn import LinearEGreedy

    ours = LinearEGreedy(Categorical(N_ACTIONS), annealing_num_steps=1000, eps_init=1.0, eps_end=0.05)
    theirs = EGreedyModule(Categorical(N_ACTIONS), annealing_num_steps=1000, eps_init=1.0, eps_end=0.05)
    done = 0
    for frames in [128] * 7 + [1, 64, 500]:  # through the end of the schedule and past it
        done += frames
        ours.step(frames)
        theirs.step(frames)
        # atol: TorchRL subtracts in float32 once per frame, drifting ~1e-5 from the exact schedule
        torch.testing.assert_close(ours.eps, theirs.eps, rtol=0, atol=5e-5)
        assert abs(float(ours.eps) - max(0.05, 1.0 - 0.95e-3 * done)) < 1e-6
    assert float(ours.eps) == pytest.approx(0.05)
    assert ours.state_dict().keys() == theirs.state_dict().keys()  # checkpoints hold the same entries


def test_linear_egreedy_picks_torchrl_s_actions():
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import EGreedyModule

    from vlmrb_torchrl.recipes.dqn import LinearEGreedy

    spec = Categorical(N_ACTIONS, shape=(8,))
    ours = LinearEGreedy(spec, annealing_num_steps=100, eps_init=0.6, eps_end=0.6)
    theirs = EGreedyModule(spec, annealing_num_steps=100, eps_init=0.6, eps_end=0.6)
    greedy = TensorDict({"action": torch.zeros(8, dtype=torch.long)}, [8])
    actions = []
    for module in (ours, theirs):
        torch.manual_seed(0)
        actions.append(torch.stack([module(greedy.clone())["action"] for _ in range(50)]))
    assert torch.equal(actions[0], actions[1])
    assert 0.4 < (actions[0] != 0).float().mean() < 0.6  # ~0.6 * 4/5 of the actions are random non-zero ones
    # and the equality above is the fast path's, not TorchRL's own forward reached by falling through
    calls = []
    original = EGreedyModule.forward
    EGreedyModule.forward = lambda self, td: calls.append(1) or original(self, td)
    try:
        ours(greedy.clone())
    finally:
        EGreedyModule.forward = original
    assert calls == []
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        assert torch.equal(ours(greedy.clone())["action"], greedy["action"])
