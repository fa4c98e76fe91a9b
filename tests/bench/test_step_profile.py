"""bench/train/step_profile.py's grouping: each op's self time goes to the group that explains it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.train.step_profile import MODEL, group_of


def event(*names: str) -> SimpleNamespace:
    """A profiler event named ``names[0]``, inside ``names[1]``, inside ``names[2]``..."""
    parent = None
    for name in reversed(names):
        parent = SimpleNamespace(name=name, cpu_parent=parent)
    return parent


@pytest.mark.parametrize(
    ("names", "group"),
    [
        (("aten::addmm_", "_ProjectedSmoothedCrossEntropy", MODEL), "matmul"),  # the loss's weight gradient
        (("aten::mm", "_ProjectedSmoothedCrossEntropy", MODEL), "matmul"),
        (("aten::_log_softmax", "_ProjectedSmoothedCrossEntropy", MODEL), "loss"),
        (("aten::copy_", "_ProjectedSmoothedCrossEntropy", MODEL), "casts"),
        (("aten::mm", "aten::_scaled_dot_product_attention_math", MODEL), "attention"),
        (("aten::native_layer_norm", "aten::layer_norm", MODEL), "norms"),
        (("aten::silu", MODEL), "elementwise"),
        (("aten::mul", "aten::_foreach_lerp_", "Optimizer.step#AdamW.step"), "optimizer"),
        (("aten::lerp_", "aten::_foreach_lerp_"), "EMA"),
        (("aten::cat", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"), "data"),
        (("training_step",), "framework"),
    ],
)
def test_each_op_counts_to_the_group_that_explains_it(names: tuple[str, ...], group: str) -> None:
    assert group_of(event(*names)) == group
