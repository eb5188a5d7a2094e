"""The compiled extensions' operators in pure torch (framework/serving/torch_ops.py).

Each operator against small cases computed by hand from the libraries' C++ loops
(rusty1s/pytorch_scatter csrc/cpu/scatter_cpu.cpp, segment_csr_cpu.cpp, reducer.h;
rusty1s/pytorch_sparse csrc/cpu/convert_cpu.cpp, diag_cpu.cpp), called through
``torch.ops`` as a TorchScript model calls them; then CMS's own ``gat_test`` loaded and run,
and a file calling an operator nobody provides refused in one line. Needs torch (the
``test`` extra installs the CPU build); no server.
"""

from __future__ import annotations

import gc

import pytest
from google.protobuf import json_format

from framework.serving import read_model_config
from framework.serving.model_spec import parse_model_config
from framework.serving.torch_backend import TorchRunner, load_torchscript

from support import CMS_MODELS

torch = pytest.importorskip("torch")

from framework.serving.torch_ops import OPERATORS, register_extension_ops, unknown_operator  # noqa: E402

register_extension_ops()
scatter = torch.ops.torch_scatter
sparse = torch.ops.torch_sparse


def f(*values):
    return torch.tensor(values, dtype=torch.float32)


def i(*values):
    return torch.tensor(values, dtype=torch.int64)


def same(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
    assert torch.equal(got, expected), (got, expected)


def test_every_operator_is_registered_with_the_librarys_schema():
    for namespace, operators in OPERATORS.items():
        for name, (schema, _) in operators.items():
            registered = str(getattr(getattr(torch.ops, namespace), name).default._schema)
            assert registered == f"{namespace}::{schema}"
    assert str(scatter.scatter_max.default._schema) == (
        "torch_scatter::scatter_max(Tensor src, Tensor index, int dim, Tensor? optional_out, int? dim_size)"
        " -> (Tensor, Tensor)"
    )
    assert register_extension_ops() == []  # a second call registers nothing


def test_scatter_max_and_min():
    src, index = f(5, 1, 3, 4, 2), i(0, 1, 0, 1, 3)
    out, arg = scatter.scatter_max(src, index, 0, None, None)
    same(out, f(5, 4, 0, 2))  # slot 2: no element, 0
    same(arg, i(0, 3, 5, 4))  # ... and src.size(dim)
    out, arg = scatter.scatter_min(src, index, 0, None, None)
    same(out, f(3, 1, 0, 2))
    same(arg, i(2, 1, 5, 4))
    out, arg = scatter.scatter_max(src, index, 0, None, 6)  # dim_size
    same(out, f(5, 4, 0, 2, 0, 0))
    same(arg, i(0, 3, 5, 4, 5, 5))


def test_scatter_ties_keep_the_first_and_integers_work():
    out, arg = scatter.scatter_max(f(2, 2, 1), i(0, 0, 0), 0, None, None)
    same(out, f(2))
    same(arg, i(0))
    out, arg = scatter.scatter_min(i(3, -2, 7), i(1, 1, 0), 0, None, None)
    same(out, i(7, -2))
    same(arg, i(2, 1))


def test_scatter_broadcasts_a_1d_index_along_dim():
    src = torch.tensor([[1.0, 4.0, 2.0], [6.0, 3.0, 5.0]])
    out, arg = scatter.scatter_max(src, i(1, 0, 1), -1, None, None)
    same(out, torch.tensor([[4.0, 2.0], [3.0, 6.0]]))
    same(arg, torch.tensor([[1, 2], [1, 0]]))


def test_scatter_into_a_given_out_starts_from_its_values_in_place():
    src = torch.tensor([[1.0, 4.0, 2.0], [6.0, 3.0, 5.0]])
    given = torch.tensor([[3.0, 9.0], [0.0, 0.0]])
    out, arg = scatter.scatter_max(src, i(1, 0, 1), 1, given, None)
    same(given, torch.tensor([[4.0, 9.0], [3.0, 6.0]]))  # updated in place
    same(out, given)
    same(arg, torch.tensor([[1, 3], [1, 0]]))  # 3 = src.size(1): the given 9 was not beaten


def test_scatter_of_nothing():
    out, arg = scatter.scatter_max(torch.empty(0), torch.empty(0, dtype=torch.int64), 0, None, None)
    assert out.shape == (0,) and arg.shape == (0,)
    out, arg = scatter.scatter_min(torch.empty(0), torch.empty(0, dtype=torch.int64), 0, None, 2)
    same(out, f(0, 0))
    same(arg, i(0, 0))


def test_segment_csr_reductions():
    src, indptr = f(1, 2, 3, 4, 5), i(0, 2, 2, 5)
    same(scatter.segment_sum_csr(src, indptr, None), f(3, 0, 12))
    same(scatter.segment_mean_csr(src, indptr, None), f(1.5, 0, 4))
    out, arg = scatter.segment_min_csr(src, indptr, None)
    same(out, f(1, 0, 3))
    same(arg, i(0, 5, 2))  # the empty segment: src.size(dim)
    out, arg = scatter.segment_max_csr(src, indptr, None)
    same(out, f(2, 0, 5))
    same(arg, i(1, 5, 4))


def test_segment_csr_trailing_and_leading_dims():
    src = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # segments along dim 0
    same(scatter.segment_sum_csr(src, i(0, 1, 3), None), torch.tensor([[1.0, 10.0], [5.0, 50.0]]))
    out, arg = scatter.segment_max_csr(src, i(0, 1, 3), None)
    same(out, torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
    same(arg, torch.tensor([[0, 0], [2, 2]]))
    rows = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # one indptr per row (dim 1)
    per_row = torch.tensor([[0, 1, 3], [0, 2, 3]])
    same(scatter.segment_sum_csr(rows, per_row, None), torch.tensor([[1.0, 5.0], [9.0, 6.0]]))
    broadcast = torch.tensor([[0, 1, 3]])  # one row of indptr for every row of src
    same(scatter.segment_sum_csr(rows, broadcast, None), torch.tensor([[1.0, 5.0], [4.0, 11.0]]))


def test_segment_csr_integer_mean_truncates_and_outside_elements_are_ignored():
    same(scatter.segment_mean_csr(i(1, 2, 4), i(0, 3), None), i(2))
    same(scatter.segment_mean_csr(i(-1, -2, -4), i(0, 3), None), i(-2))
    same(scatter.segment_sum_csr(f(9, 1, 2, 9), i(1, 3), None), f(3))
    given = torch.zeros(3)
    same(scatter.segment_sum_csr(f(1, 2, 3, 4, 5), i(0, 2, 2, 5), given), f(3, 0, 12))
    same(given, f(3, 0, 12))


def test_gather_csr_repeats_each_entry_over_its_segment():
    same(scatter.gather_csr(f(10, 20, 30), i(0, 2, 2, 5), None), f(10, 10, 30, 30, 30))
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    same(scatter.gather_csr(rows, i(0, 1, 3), None), torch.tensor([[1.0, 2.0], [3.0, 4.0], [3.0, 4.0]]))
    given = torch.full((5,), -1.0)
    same(scatter.gather_csr(f(10, 20, 30), i(0, 2, 2, 5), given), f(10, 10, 30, 30, 30))
    same(given, f(10, 10, 30, 30, 30))
    assert scatter.gather_csr(torch.empty(0), i(0), None).shape == (0,)


def test_ind2ptr_and_ptr2ind():
    same(sparse.ind2ptr(i(0, 0, 1, 3, 3, 3), 5), i(0, 2, 3, 3, 6, 6))
    same(sparse.ptr2ind(i(0, 2, 3, 3, 6, 6), 6), i(0, 0, 1, 3, 3, 3))
    same(sparse.ind2ptr(i(2), 3), i(0, 0, 0, 1))


@pytest.mark.parametrize(
    ("k", "row", "col", "mask"),
    [
        # 3 x 3 without its k-th diagonal; the mask of where each entry lands once the
        # diagonal's entries are put back row by row (written out by hand).
        (0, (0, 1, 1, 2), (1, 0, 2, 0), (False, True, True, False, True, True, False)),
        (1, (0, 1, 2, 2), (0, 1, 0, 2), (True, False, True, False, True, True)),
        (-1, (0, 0, 1, 2), (0, 2, 1, 2), (True, True, False, True, False, True)),
    ],
)
def test_non_diag_mask(k, row, col, mask):
    same(sparse.non_diag_mask(i(*row), i(*col), 3, 3, k), torch.tensor(mask))


def test_torchscript_calls_them():
    @torch.jit.script
    def uses(src, index):  # TorchScript: unannotated arguments are Tensors
        return torch.ops.torch_scatter.scatter_max(src, index, 0, None, None)[0]

    same(uses(f(5, 1, 3), i(0, 1, 0)), f(5, 1))


def test_cms_gat_test_loads_and_runs():
    """CMS's own file, unchanged: [n, 7] log-probabilities on a small random graph."""
    path = CMS_MODELS / "HeterogeneousCore" / "SonicTriton" / "data" / "models" / "gat_test"
    if not (path / "1" / "model.pt").is_file():
        pytest.skip(f"CMS's gat_test is not in {CMS_MODELS} (set PYSONIC_CMS_MODELS to a CMSSW data layout)")
    config = json_format.MessageToDict(read_model_config(path), preserving_proto_field_name=True)
    spec = parse_model_config(config)
    runner = TorchRunner(spec, str(path / "1" / "model.pt"))
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(6, 1433, generator=generator)
    edges = torch.randint(0, 6, (2, 25), generator=generator)
    logits = runner({"x__0": x, "edgeindex__1": edges})["logits__0"]
    assert logits.shape == (6, 7) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits.exp().sum(dim=1), torch.ones(6))  # log_softmax rows


class _UsesAnExtension(torch.nn.Module):  # type: ignore[name-defined]  # torch: importorskip's module
    def forward(self, x):  # TorchScript: an unannotated argument is a Tensor
        return torch.ops.pysonic_test_ext.double_it(x)


def test_a_model_calling_an_operator_nobody_provides_is_one_line(tmp_path):
    # The file is written while a library defines the operator; that library is then
    # collected, which removes the operator (torch.library's documented lifetime).
    library = torch.library.Library("pysonic_test_ext", "DEF")
    library.define("double_it(Tensor x) -> Tensor")
    library.impl("double_it", lambda x: 2 * x, "CompositeImplicitAutograd")
    path = tmp_path / "missing.pt"
    torch.jit.save(torch.jit.script(_UsesAnExtension()), str(path))
    del library
    gc.collect()
    with pytest.raises(RuntimeError) as info:
        load_torchscript("needs_ext", str(path), "cpu")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("model 'needs_ext': its TorchScript calls the operator pysonic_test_ext::double_it,")
    assert unknown_operator(RuntimeError("x\nUnknown builtin op: a_b::c_d.\nmore")) == "a_b::c_d"
