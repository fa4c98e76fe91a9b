"""bench/decode/profile.py's grouping: each op's self time goes to the group that explains it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.decode.profile import ENCODE, STEP, Profile, group_of

V = 8000


def event(
    *names: str, shapes: list[list[int]], parent_shapes: list[list[int]] | None = None
) -> SimpleNamespace:
    """A profiler event named ``names[0]`` with input ``shapes``, inside ``names[1]`` (with
    ``parent_shapes``), inside ``names[2]``..."""
    parent = None
    for name in reversed(names):
        parent = SimpleNamespace(name=name, cpu_parent=parent, input_shapes=[])
    parent.input_shapes = shapes
    if parent.cpu_parent is not None:
        parent.cpu_parent.input_shapes = parent_shapes or []
    return parent


@pytest.mark.parametrize(
    ("names", "shapes", "group"),
    [
        (("aten::mm", "aten::linear", ENCODE), [[64, 256], [256, 256]], "encoder"),
        (("aten::copy_", "aten::index_select", ENCODE), [[64, 4, 9, 64]], "encoder"),
        (
            ("aten::index_select", "CachedSteps.select"),
            [[320, 4, 12, 64], [320]],
            "cache copies and reorders",
        ),
        (("aten::copy_", STEP), [[320, 4, 1, 64], [320, 4, 1, 64]], "cache copies and reorders"),
        (("aten::copy_", "aten::_to_copy", STEP), [[683, 256], [683, 256]], "casts"),
        (("aten::mm", "aten::linear", STEP), [[320, 256], [256, V]], "output projection"),
        (("aten::bmm", "aten::matmul", STEP), [[1280, 1, 64], [1280, 64, 12]], "decoder matmuls"),
        (("aten::mm", "aten::linear", STEP), [[320, 256], [256, 683]], "decoder matmuls"),
        (("aten::_softmax", "aten::softmax", STEP), [[320, 4, 1, 12]], "attention"),
        (("aten::_log_softmax", "aten::log_softmax"), [[320, V]], "vocabulary"),
        (("aten::topk",), [[64, 5 * V]], "vocabulary"),
        (("aten::index_select", "aten::embedding", STEP), [[8000, 256], [320]], "decoder elementwise"),
        (("aten::empty", STEP), [], "allocation"),
        (("aten::native_layer_norm", "aten::layer_norm", STEP), [[320, 1, 256]], "decoder elementwise"),
        (("aten::nonzero",), [[64]], "search bookkeeping"),
        (("aten::cat",), [[320, 7], [320, 1]], "search bookkeeping"),
        ((STEP,), [], "framework"),
    ],
)
def test_each_op_counts_to_the_group_that_explains_it(
    names: tuple[str, ...], shapes: list[list[int]], group: str
) -> None:
    assert group_of(event(*names, shapes=shapes), V) == group


def test_an_op_inside_one_on_the_attention_layout_is_attention_and_its_copies_are_cache_copies() -> None:
    heads = [[64, 4, 1, 64], [64, 4, 64, 12]]  # (B, H, 1, D/H) @ (B, H, D/H, T)
    bmm = event("aten::bmm", "aten::matmul", STEP, shapes=[[256, 1, 64], [256, 64, 12]], parent_shapes=heads)
    copy = event("aten::copy_", "aten::matmul", STEP, shapes=[[256, 64, 12]], parent_shapes=heads)
    assert (group_of(bmm, V), group_of(copy, V)) == ("attention", "cache copies and reorders")


def test_the_summary_states_the_matrix_work_as_a_share_of_the_ceiling_at_the_unprofiled_speed() -> None:
    profile = Profile({"encoder": 30.0, "framework": 10.0}, seconds=2.0, steps=4, rows=40)
    profile.matmul_flops, profile.ceiling = 60e9, 100e9
    lines = profile.lines(sentences=10)
    assert "| encoder | 30.0 | 7.500 | 75.0 % |" in lines
    assert "steps: 4, rows per step: 10.0" in lines
    assert lines[-1] == (
        "matrix products: 60.0 GFLOP, 30.0 GFLOP/s unprofiled: 30.0 % of the matmul ceiling (100 GFLOP/s)"
    )
