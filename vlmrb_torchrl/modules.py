"""Network layers for the agents.

:class:`OneHotLinear` is ``nn.Linear`` on a one-hot vector, given the positions of its ones
(MiniGrid's ``observation="indices"``): the same maths, without the 984-wide zeros.
:class:`EnsembleMLP` is ``n`` MLPs of one shape evaluated as one (SAC's twin critics): one
batched matrix product per layer instead of one per layer and member.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["OneHotLinear", "EnsembleMLP"]


class _OneHotLinearFunction(torch.autograd.Function):
    """``embedding_bag(sum)`` forward; the weight's gradient as the dense ``one_hot.T @ grad``.

    ``embedding_bag``'s own backward scatters one row per index into the dense gradient, which
    is 2-3x slower on a CPU than the matrix product ``nn.Linear``'s backward does: with a batch of
    samples almost every row of the weight gets a gradient anyway.
    """

    @staticmethod
    def forward(ctx, indices: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(indices)
        ctx.in_features = weight.shape[0]
        return F.embedding_bag(indices, weight, mode="sum")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (indices,) = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return None, None
        one_hot = torch.zeros(indices.shape[0], ctx.in_features, dtype=grad.dtype, device=grad.device)
        one_hot.scatter_(1, indices, 1.0)
        return None, one_hot.t() @ grad


class _PaddedOneHotLinearFunction(torch.autograd.Function):
    """``embedding_bag(sum)`` over ragged rows (the positions of each sample's ones, given flat with
    ``offsets``); the weight's gradient computed on the columns that occur in the batch only.

    A fully observed grid has thousands of one-hot inputs of which a batch touches a few hundred:
    the dense ``one_hot.T @ grad`` of :class:`_OneHotLinearFunction` would multiply mostly zeros.
    """

    @staticmethod
    def forward(ctx, values: torch.Tensor, offsets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(values, offsets)
        ctx.in_features = weight.shape[0]
        return F.embedding_bag(values, weight, offsets, mode="sum")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        values, offsets = ctx.saved_tensors
        if not ctx.needs_input_grad[2]:
            return None, None, None
        rows = grad.shape[0]
        counts = torch.diff(offsets, append=offsets.new_tensor([values.numel()]))
        row_of = torch.repeat_interleave(torch.arange(rows, device=grad.device), counts)
        columns, column_of = torch.unique(values, return_inverse=True)
        one_hot = torch.zeros(rows, columns.numel(), dtype=grad.dtype, device=grad.device)
        one_hot[row_of, column_of] = 1.0
        weight_grad = torch.zeros(ctx.in_features, grad.shape[1], dtype=grad.dtype, device=grad.device)
        weight_grad.index_copy_(0, columns, one_hot.t() @ grad)
        return None, None, weight_grad


class OneHotLinear(nn.Module):
    """``nn.Linear(in_features, out_features)`` applied to a multi-hot vector given by its active positions.

    ``layer(indices)`` equals ``linear(x)`` where ``x[b, indices[b, k]] = 1`` for every ``k``
    and 0 elsewhere — the sum of the active rows of the weight plus the bias — at the cost of
    those rows: MiniGrid's 7x7 view is 984 one-hot inputs of which 148 are ones. The forward
    pass runs ``embedding_bag``; the backward pass gives the weight the same dense gradient
    ``nn.Linear`` would. ``indices`` are ``[*batch, k]`` integers (any integer dtype; each row's
    positions distinct, as in a one-hot encoding); no gradient flows to them.

    The weight is stored as ``[in_features, out_features]`` (``nn.Embedding``'s layout, so the
    gathered rows are contiguous); :meth:`from_linear` copies an ``nn.Linear``'s parameters in,
    and a freshly built layer draws exactly the values ``nn.Linear`` would from the same RNG state.

    Args:
        in_features (int): size of the one-hot vector (MiniGrid 7x7: 984).
        out_features (int): output size.
        bias (bool): learn an additive bias. Defaults to ``True``.

    Examples:
        >>> torch.manual_seed(0)
        <torch._C.Generator object at ...>
        >>> linear = nn.Linear(6, 3)
        >>> layer = OneHotLinear.from_linear(linear)
        >>> indices = torch.tensor([[0, 4], [1, 5]])
        >>> one_hot = torch.zeros(2, 6).scatter_(1, indices, 1.0)
        >>> torch.allclose(layer(indices), linear(one_hot))
        True
        >>> padded = torch.tensor([[0, 4], [1, -1]])  # the second row has a single one
        >>> torch.allclose(layer(padded)[1], linear(torch.eye(6)[1]))
        True
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        # nn.Linear's initialisation, drawn in its [out, in] layout so a seeded build matches it exactly
        weight = torch.empty(out_features, in_features)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.weight = nn.Parameter(weight.t().contiguous())
        if bias:
            bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
            self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> OneHotLinear:
        """A layer with a copy of ``linear``'s weight (transposed) and bias; draws nothing from the RNG."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight = nn.Parameter(linear.weight.detach().t().contiguous())
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone())
        else:
            layer.register_parameter("bias", None)
        return layer

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        if indices.dtype.is_floating_point or indices.dtype == torch.bool:
            raise TypeError(f"OneHotLinear takes integer positions of the ones, got a {indices.dtype} tensor "
                            "(a one-hot vector? use nn.Linear, or the env's observation='indices').")
        batch = indices.shape[:-1]
        flat = indices.reshape(-1, indices.shape[-1])
        flat = flat.long() if flat.dtype not in (torch.int32, torch.int64) else flat
        padding = flat < 0
        if bool(padding.any()):
            present = ~padding
            counts = present.sum(1)
            values, offsets = flat[present], counts.cumsum(0) - counts
            if torch.is_grad_enabled() and self.weight.requires_grad:
                out = _PaddedOneHotLinearFunction.apply(values, offsets, self.weight)
            else:
                out = F.embedding_bag(values, self.weight, offsets, mode="sum")
        elif torch.is_grad_enabled() and self.weight.requires_grad:
            out = _OneHotLinearFunction.apply(flat, self.weight)
        else:  # acting, targets: no autograd node to build
            out = F.embedding_bag(flat, self.weight, mode="sum")
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*batch, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class EnsembleMLP(nn.Module):
    """``n`` MLPs of the same shape (ReLU between layers) evaluated as one batched network.

    Layer ``l`` holds ``weight_l`` ``[n, in, out]`` and ``bias_l`` ``[n, 1, out]``: member ``i``'s
    ``nn.Linear`` weight transposed, so a layer is one ``torch.baddbmm`` over the members. Inputs
    shared by every member (``[B, in]``) go through the first layer as a single matrix product
    with the members' weights side by side. On a CPU, two 2x256 critics evaluated this way
    cost about what one costs as two ``nn.Sequential`` calls, less the per-module overhead.

    A freshly built ensemble draws, member after member, the values ``nn.Linear`` layers of
    these sizes would draw from the same RNG state (each member initialised as
    ``torchrl.modules.MLP`` / ``nn.Linear`` initialise theirs); :meth:`from_mlps` copies existing
    networks in.

    Args:
        in_features (int): input size.
        out_features (int): output size.
        num_cells (Sequence[int]): hidden layer sizes.

    Keyword Args:
        n (int): ensemble members. Defaults to ``2``.

    Examples:
        >>> torch.manual_seed(0)
        <torch._C.Generator object at ...>
        >>> mlps = [nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1)) for _ in range(2)]
        >>> ensemble = EnsembleMLP.from_mlps(mlps)
        >>> x = torch.randn(4, 5)
        >>> ensemble(x).shape
        torch.Size([2, 4, 1])
        >>> torch.allclose(ensemble(x)[1], mlps[1](x), atol=1e-6)
        True
    """

    def __init__(self, in_features: int, out_features: int, num_cells: Sequence[int], *, n: int = 2) -> None:
        super().__init__()
        sizes = [in_features, *num_cells, out_features]
        layers = [[nn.Linear(fan_in, fan_out) for fan_in, fan_out in zip(sizes[:-1], sizes[1:])] for _ in range(n)]
        self._set_layers(layers)

    @classmethod
    def from_mlps(cls, mlps: Sequence[nn.Module]) -> EnsembleMLP:
        """An ensemble holding copies of the ``nn.Linear`` layers of ``mlps`` (same sizes, ReLU between
        layers: e.g. ``torchrl.modules.MLP``); draws nothing from the RNG."""
        layers = [[m for m in mlp.modules() if isinstance(m, nn.Linear)] for mlp in mlps]
        if not layers or any(len(member) != len(layers[0]) for member in layers) or not layers[0]:
            raise ValueError("EnsembleMLP.from_mlps: expected networks with the same number of nn.Linear layers.")
        ensemble = cls.__new__(cls)
        nn.Module.__init__(ensemble)
        ensemble._set_layers(layers)
        return ensemble

    def _set_layers(self, layers: list[list[nn.Linear]]) -> None:
        self.n = len(layers)
        self.sizes = [layers[0][0].in_features, *(layer.out_features for layer in layers[0])]
        for depth in range(len(self.sizes) - 1):
            members = [member[depth] for member in layers]
            if any(m.bias is None or m.weight.shape != members[0].weight.shape for m in members):
                raise ValueError("EnsembleMLP: every member's layers must have the same shapes and a bias.")
            self.register_parameter(f"weight_{depth}", nn.Parameter(
                torch.stack([m.weight.detach().t() for m in members]).contiguous()))
            self.register_parameter(f"bias_{depth}", nn.Parameter(
                torch.stack([m.bias.detach() for m in members]).unsqueeze(1).contiguous()))
        self.depth = len(self.sizes) - 1

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(weight [n, in, out], bias [n, 1, out])`` per layer, input to output."""
        return [(getattr(self, f"weight_{d}"), getattr(self, f"bias_{d}")) for d in range(self.depth)]

    def forward(self, x: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """Every member on ``x``: ``[B, in]`` (shared) or ``[n, B, in]`` (one batch per member) -> ``[n, B, out]``.

        ``detach=True`` uses the parameters without tracking them (gradients reach ``x`` only): SAC's
        actor loss, which must not train the critics.
        """
        h = x
        for depth, (weight, bias) in enumerate(self.layers()):
            if detach:
                weight, bias = weight.detach(), bias.detach()
            if h.ndim == 2:  # shared input: one [B, in] @ [in, n * out] product
                n, fan_in, fan_out = weight.shape
                h = (h @ weight.transpose(0, 1).reshape(fan_in, n * fan_out)).reshape(-1, n, fan_out).transpose(0, 1)
                h = h + bias
            else:
                h = torch.baddbmm(bias, h, weight)
            if depth < self.depth - 1:
                h = torch.relu(h)
        return h

    def extra_repr(self) -> str:
        return f"n={self.n}, sizes={self.sizes}"
