"""Network layers for the agents' observations.

:class:`OneHotLinear` is ``nn.Linear`` on a one-hot vector, given the positions of its ones
(MiniGrid's ``observation="indices"``): the same maths, without the 984-wide zeros.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["OneHotLinear"]


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
