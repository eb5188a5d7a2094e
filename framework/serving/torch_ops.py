"""Operators of compiled PyTorch extensions, written in pure torch, for TorchScript models.

A TorchScript file saved with PyTorch Geometric (CMS's ``gat_test``, the graph-attention
network of CMSSW's SonicTriton unit test) calls compiled operators of ``torch_scatter`` and
``torch_sparse`` (``ops.torch_scatter.scatter_max(...)`` in its code). ``torch.jit.load``
resolves every such call when the file is loaded, so those operators must exist first:
Triton's PyTorch backend gets them from the libraries' shared objects (``LD_PRELOAD``, as
CMSSW's test README does). Here :func:`register_extension_ops` registers, through
``torch.library``, operators of the same names and schemas whose implementations are plain
torch (any device), so the file loads unchanged without those libraries installed. An
operator that is already defined (the real library is loaded) is left alone.

The semantics are the libraries' own, read from their C++ sources (rusty1s/pytorch_scatter
``csrc/scatter.cpp``, ``csrc/segment_csr.cpp``, ``csrc/cpu/scatter_cpu.cpp``,
``csrc/cpu/segment_csr_cpu.cpp``, ``csrc/cpu/reducer.h``; rusty1s/pytorch_sparse
``csrc/cpu/convert_cpu.cpp``, ``csrc/cpu/diag_cpu.cpp``) and written again here:

* ``torch_scatter::scatter_min`` / ``scatter_max(src, index, dim, optional_out, dim_size)
  -> (out, arg_out)``: ``index`` is broadcast to ``src`` (a 1-D index lies along ``dim``);
  ``out`` has ``src``'s shape with ``dim_size`` (default ``max(index) + 1``, 0 for an empty
  index) along ``dim``. Without ``optional_out``, a slot that no element reaches is 0, and
  its ``arg_out`` is ``src.size(dim)``; with it, the reduction starts from its values (which
  it updates in place) and ``arg_out`` is ``src.size(dim)`` where no element beats them.
  ``arg_out`` (int64) is the position along ``dim`` of the first element that reaches the
  extreme (the compiled loop replaces only on a strict ``<`` / ``>``).
* ``torch_scatter::segment_{sum,mean,min,max}_csr(src, indptr, optional_out)``: segments
  ``[indptr[i], indptr[i + 1])`` of ``src`` along ``dim = indptr.dim() - 1`` (``indptr``'s
  leading dims are broadcast to ``src``'s), reduced to ``out`` of ``indptr.size(-1) - 1``
  entries along ``dim``; an empty segment gives 0 (mean: the sum over ``max(count, 1)``, an
  integer mean truncated); min/max also give ``arg_out`` (int64, the position along ``dim``,
  ``src.size(dim)`` for an empty segment).
* ``torch_scatter::gather_csr(src, indptr, optional_out)``: the inverse, entry ``i`` of
  ``src`` along ``dim`` repeated over ``[indptr[i], indptr[i + 1])``; ``out`` has
  ``indptr[-1]`` entries along ``dim`` (0 for an empty ``src``).
* ``torch_sparse::ind2ptr(ind, M)``: the CSR pointer (int64, ``M + 1`` entries) of a
  sorted row index: ``ptr[j]`` = the number of entries of ``ind`` below ``j``.
* ``torch_sparse::ptr2ind(ptr, E)``: the row index (``E`` entries) of a CSR pointer.
* ``torch_sparse::non_diag_mask(row, col, M, N, k)``: for a COO matrix of ``M x N``, sorted
  by row, without entries on its ``k``-th diagonal, the bool mask (``E + num_diag`` entries,
  ``num_diag = min(M + k, N)`` if ``k < 0`` else ``min(M, N - k)``) of where its entries go
  once the diagonal's entries are inserted row by row (``torch_sparse.set_diag``).

Not reproduced: the compiled min/max loops skip NaN (their strict comparisons are false);
torch's reductions here propagate it. Gradients flow through the torch operations used
(the compiled libraries write their own backward functions, with the same results).

Imported only by the torch runner (:mod:`framework.serving.torch_backend`), lazily:
torch is not a run-time dependency of the CPU path.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["OPERATORS", "register_extension_ops", "unknown_operator"]

Tensor = torch.Tensor


# -- torch_scatter ---------------------------------------------------------------------


def _broadcast(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """torch_scatter's ``broadcast``: a 1-D index lies along ``dim``; trailing dims added."""
    if index.dim() == 1:
        for _ in range(dim):
            index = index.unsqueeze(0)
    for _ in range(index.dim(), src.dim()):
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def _extreme(dtype: torch.dtype, reduce: str) -> float | int:
    """The compiled reducer's start value: the dtype's largest value for min, lowest for max."""
    info: Any = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    extreme: float | int = info.max if reduce == "amin" else info.min
    return extreme


def _positions(src: Tensor, dim: int) -> Tensor:
    """Each element's position along ``dim`` (int64, ``src``'s shape)."""
    shape = [1] * src.dim()
    shape[dim] = src.size(dim)
    return torch.arange(src.size(dim), device=src.device).view(shape).expand(src.shape)


def _first_reaching(src: Tensor, index: Tensor, dim: int, reached: Tensor, eligible: Tensor, slots: Any) -> Tensor:
    """``arg_out``: per slot, the first position along ``dim`` whose element equals the slot's
    result and is ``eligible``; ``src.size(dim)`` where there is none."""
    none = src.size(dim)
    candidate = torch.where((src == reached) & eligible, _positions(src, dim), none)
    arg = torch.full(slots, none, dtype=torch.int64, device=src.device)
    return arg.scatter_reduce(dim, index, candidate, "amin", include_self=True)


def _scatter_extreme(
    src: Tensor, index: Tensor, dim: int, out: Tensor | None, dim_size: int | None, reduce: str
) -> tuple[Tensor, Tensor]:
    dim = dim + src.dim() if dim < 0 else dim
    index = _broadcast(index, src, dim)
    if out is None:
        size = list(src.shape)
        if dim_size is not None:
            size[dim] = dim_size
        else:
            size[dim] = int(index.max()) + 1 if index.numel() else 0
        start = torch.full(size, _extreme(src.dtype, reduce), dtype=src.dtype, device=src.device)
    else:
        start = out.clone()
    result = start.scatter_reduce(dim, index, src, reduce, include_self=True)
    begin = start.gather(dim, index)
    beats = src < begin if reduce == "amin" else src > begin  # the compiled loop's strict update
    arg = _first_reaching(src, index, dim, result.gather(dim, index), beats, result.shape)
    if out is None:  # untouched slots keep the start value; the library writes 0 there
        return result.masked_fill(result == start, 0), arg
    return out.copy_(result), arg


def scatter_min(
    src: Tensor, index: Tensor, dim: int, optional_out: Tensor | None, dim_size: int | None
) -> tuple[Tensor, Tensor]:
    """``torch_scatter::scatter_min`` (see the module docstring)."""
    return _scatter_extreme(src, index, dim, optional_out, dim_size, "amin")


def scatter_max(
    src: Tensor, index: Tensor, dim: int, optional_out: Tensor | None, dim_size: int | None
) -> tuple[Tensor, Tensor]:
    """``torch_scatter::scatter_max`` (see the module docstring)."""
    return _scatter_extreme(src, index, dim, optional_out, dim_size, "amax")


def _expanded_indptr(src: Tensor, indptr: Tensor) -> tuple[Tensor, int]:
    """``indptr`` with its leading dims broadcast to ``src``'s, and the segment dim."""
    if src.dim() < indptr.dim():
        raise RuntimeError(f"indptr has {indptr.dim()} dims, src only {src.dim()}")
    dim = indptr.dim() - 1
    return indptr.expand(*src.shape[:dim], indptr.size(-1)).contiguous(), dim


def _segment_of(indptr: Tensor, length: int, trailing: int) -> tuple[Tensor, Tensor]:
    """For positions ``0 .. length - 1`` along the segment dim: the segment each lies in
    (shape ``indptr.shape[:-1] + (length,)`` then ``trailing`` dims of 1) and whether it lies
    in one at all (before ``indptr[0]`` or from ``indptr[-1]`` on it does not)."""
    positions = torch.arange(length, device=indptr.device).expand(*indptr.shape[:-1], length).contiguous()
    segment = torch.searchsorted(indptr, positions, right=True) - 1
    inside = (segment >= 0) & (segment < indptr.size(-1) - 1)
    view = tuple(segment.shape) + (1,) * trailing
    return segment.view(view), inside.view(view)


def _segment_csr(src: Tensor, indptr: Tensor, out: Tensor | None, reduce: str) -> tuple[Tensor, Tensor | None]:
    indptr, dim = _expanded_indptr(src, indptr)
    segments = max(indptr.size(-1) - 1, 0)
    segment, inside = _segment_of(indptr, src.size(dim), src.dim() - dim - 1)
    # Elements outside every segment go to one more slot, dropped at the end.
    index = torch.where(inside, segment, segments).expand(src.shape)
    size = list(src.shape)
    size[dim] = segments + 1
    arg: Tensor | None = None
    if reduce in ("sum", "mean"):
        result = torch.zeros(size, dtype=src.dtype, device=src.device).scatter_add(dim, index, src)
        if reduce == "mean":
            count = (indptr[..., 1:] - indptr[..., :-1]).clamp(min=1)
            count = torch.cat([count, count.new_ones(count.shape[:-1] + (1,))], dim=-1)
            count = count.view(tuple(count.shape) + (1,) * (src.dim() - dim - 1)).to(src.dtype)
            rounding = None if src.dtype.is_floating_point else "trunc"  # C++'s integer division
            result = torch.div(result, count, rounding_mode=rounding)
    else:  # amin / amax: an empty segment keeps the zero it starts from
        result = torch.zeros(size, dtype=src.dtype, device=src.device)
        result = result.scatter_reduce(dim, index, src, reduce, include_self=False)
        every = torch.ones_like(src, dtype=torch.bool)
        arg = _first_reaching(src, index, dim, result.gather(dim, index), every, size).narrow(dim, 0, segments)
    result = result.narrow(dim, 0, segments)
    if out is not None:
        result = out.copy_(result)
    return result, arg


def segment_sum_csr(src: Tensor, indptr: Tensor, optional_out: Tensor | None) -> Tensor:
    """``torch_scatter::segment_sum_csr`` (see the module docstring)."""
    return _segment_csr(src, indptr, optional_out, "sum")[0]


def segment_mean_csr(src: Tensor, indptr: Tensor, optional_out: Tensor | None) -> Tensor:
    """``torch_scatter::segment_mean_csr`` (see the module docstring)."""
    return _segment_csr(src, indptr, optional_out, "mean")[0]


def _with_arg(result: tuple[Tensor, Tensor | None]) -> tuple[Tensor, Tensor]:
    out, arg = result
    assert arg is not None  # min and max always compute it
    return out, arg


def segment_min_csr(src: Tensor, indptr: Tensor, optional_out: Tensor | None) -> tuple[Tensor, Tensor]:
    """``torch_scatter::segment_min_csr`` (see the module docstring)."""
    return _with_arg(_segment_csr(src, indptr, optional_out, "amin"))


def segment_max_csr(src: Tensor, indptr: Tensor, optional_out: Tensor | None) -> tuple[Tensor, Tensor]:
    """``torch_scatter::segment_max_csr`` (see the module docstring)."""
    return _with_arg(_segment_csr(src, indptr, optional_out, "amax"))


def gather_csr(src: Tensor, indptr: Tensor, optional_out: Tensor | None) -> Tensor:
    """``torch_scatter::gather_csr`` (see the module docstring)."""
    indptr, dim = _expanded_indptr(src, indptr)
    if src.size(dim) not in (0, indptr.size(-1) - 1):
        raise RuntimeError(f"gather_csr: src has {src.size(dim)} entries along dim {dim}, indptr {indptr.size(-1)}")
    size = list(src.shape)
    if optional_out is not None:
        size[dim] = optional_out.size(dim)
    else:
        size[dim] = int(indptr.flatten()[-1]) if src.numel() else 0
    if src.numel() == 0:
        return optional_out if optional_out is not None else src.new_empty(size)
    segment, inside = _segment_of(indptr, size[dim], src.dim() - dim - 1)
    index = segment.clamp(0, src.size(dim) - 1).expand(size)
    gathered = src.gather(dim, index)
    if optional_out is None:  # positions outside every segment: the library leaves them unset
        return torch.where(inside, gathered, torch.zeros((), dtype=src.dtype, device=src.device))
    return optional_out.copy_(torch.where(inside, gathered, optional_out))


# -- torch_sparse ----------------------------------------------------------------------


def ind2ptr(ind: Tensor, M: int) -> Tensor:  # noqa: N803 - torch_sparse's name
    """``torch_sparse::ind2ptr`` (see the module docstring)."""
    return torch.searchsorted(ind, torch.arange(M + 1, dtype=ind.dtype, device=ind.device))


def ptr2ind(ptr: Tensor, E: int) -> Tensor:  # noqa: N803 - torch_sparse's name
    """``torch_sparse::ptr2ind`` (see the module docstring)."""
    return torch.searchsorted(ptr, torch.arange(E, dtype=ptr.dtype, device=ptr.device), right=True) - 1


def non_diag_mask(row: Tensor, col: Tensor, M: int, N: int, k: int) -> Tensor:  # noqa: N803 - torch_sparse's names
    """``torch_sparse::non_diag_mask`` (see the module docstring)."""
    edges = row.size(0)
    num_diag = min(M + k, N) if k < 0 else min(M, N - k)
    i = torch.arange(edges, device=row.device)
    diagonal_col = row + k  # the column of row r's diagonal entry
    # Where entry i goes: after the diagonal entries of the rows before it (and of its own
    # row when it lies right of the diagonal); after all of them past the last diagonal row.
    before = diagonal_col > col
    rows_before = row + k if k < 0 else row
    position = torch.where(before, i + rows_before, i + rows_before + 1)
    position = torch.where(diagonal_col >= N, i + num_diag, position)
    if k < 0:
        position = torch.where(diagonal_col < 0, i, position)
    keep = (diagonal_col != col) | (diagonal_col >= N) | (diagonal_col < 0)
    mask = torch.zeros(edges + max(num_diag, 0), dtype=torch.bool, device=row.device)
    return mask.index_fill(0, position[keep], True)


# -- registration ----------------------------------------------------------------------

# namespace -> name -> (schema, implementation). The schemas are those the libraries
# register (types and order; the argument names are their C++ sources').
OPERATORS: dict[str, dict[str, tuple[str, Callable[..., Any]]]] = {
    "torch_scatter": {
        "scatter_min": (
            "scatter_min(Tensor src, Tensor index, int dim, Tensor? optional_out, int? dim_size) -> (Tensor, Tensor)",
            scatter_min,
        ),
        "scatter_max": (
            "scatter_max(Tensor src, Tensor index, int dim, Tensor? optional_out, int? dim_size) -> (Tensor, Tensor)",
            scatter_max,
        ),
        "segment_sum_csr": (
            "segment_sum_csr(Tensor src, Tensor indptr, Tensor? optional_out) -> Tensor",
            segment_sum_csr,
        ),
        "segment_mean_csr": (
            "segment_mean_csr(Tensor src, Tensor indptr, Tensor? optional_out) -> Tensor",
            segment_mean_csr,
        ),
        "segment_min_csr": (
            "segment_min_csr(Tensor src, Tensor indptr, Tensor? optional_out) -> (Tensor, Tensor)",
            segment_min_csr,
        ),
        "segment_max_csr": (
            "segment_max_csr(Tensor src, Tensor indptr, Tensor? optional_out) -> (Tensor, Tensor)",
            segment_max_csr,
        ),
        "gather_csr": ("gather_csr(Tensor src, Tensor indptr, Tensor? optional_out) -> Tensor", gather_csr),
    },
    "torch_sparse": {
        "ind2ptr": ("ind2ptr(Tensor ind, int M) -> Tensor", ind2ptr),
        "ptr2ind": ("ptr2ind(Tensor ptr, int E) -> Tensor", ptr2ind),
        "non_diag_mask": ("non_diag_mask(Tensor row, Tensor col, int M, int N, int k) -> Tensor", non_diag_mask),
    },
}
"""Namespace -> name -> (schema, pure-torch implementation), for every operator provided here."""

# A torch.library.Library removes its registrations when it is collected: keep them all.
_LIBRARIES: list[Any] = []
_LOCK = threading.Lock()


def _defined(namespace: str, name: str) -> bool:
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register_extension_ops() -> list[str]:
    """Register every operator of :data:`OPERATORS` that is not defined yet (idempotent,
    thread-safe; for the whole process). Call it before ``torch.jit.load``.

    Returns:
        The qualified names registered by this call (``"torch_scatter::scatter_max"``);
        empty when all were defined already (by an earlier call or the real libraries).
    """
    registered: list[str] = []
    with _LOCK:
        for namespace, operators in OPERATORS.items():
            missing = [name for name in operators if not _defined(namespace, name)]
            if not missing:
                continue
            # torch.library's Library, define and impl are unannotated: hence the ignores.
            library = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]  # the namespace may exist already
            for name in missing:
                schema, implementation = operators[name]
                library.define(schema)  # type: ignore[no-untyped-call]
                # Composite: one implementation for every device, autograd through its torch ops.
                library.impl(name, implementation, "CompositeImplicitAutograd")  # type: ignore[no-untyped-call]
                registered.append(f"{namespace}::{name}")
            _LIBRARIES.append(library)
    return registered


_UNKNOWN = re.compile(r"Unknown builtin op: ([\w.]+::\w+)")


def unknown_operator(error: BaseException) -> str | None:
    """The operator a ``torch.jit.load`` error says nobody provides (``"ns::name"``), or None."""
    found = _UNKNOWN.search(str(error))
    return found.group(1) if found else None
