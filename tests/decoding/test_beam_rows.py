"""Beam search keeps a parent's first child in the parent's cache row, so a step copies only the rows
of beams that branched; the moves in place give the rows a gather would."""

from __future__ import annotations

import torch

from seq2seq.decoding.beam import rows_in_place
from seq2seq.model.layers import Moves


def test_each_parent_keeps_its_first_child_and_the_other_children_fill_childless_rows() -> None:
    parents = torch.tensor([[0, 0, 1, 3, 3], [4, 3, 2, 1, 0], [2, 2, 2, 2, 2]])  # (n, K): parents
    beam_of_row = rows_in_place(parents)
    assert beam_of_row.tolist() == [
        [0, 2, 1, 3, 4],  # rows 0, 1, 3 keep a child; beam 1 takes row 2, beam 4 row 4 (childless)
        [4, 3, 2, 1, 0],  # every beam has its own parent: nothing moves
        [1, 2, 0, 3, 4],  # one parent: its first child stays in row 2, the others fill 0, 1, 3, 4
    ]
    stayed = parents.gather(1, beam_of_row) == torch.arange(5)  # (n, K) rows whose parent is the row itself
    assert stayed.sum(1).tolist() == [3, 5, 1]  # one per parent with children: only the rest are copied


def test_moving_rows_in_place_gives_the_gathered_rows_and_copies_only_the_changed() -> None:
    torch.manual_seed(0)
    buffer = torch.randn(6, 2, 8, 4)  # (N, H, capacity, D/H)
    source = torch.tensor([0, 0, 5, 3, 2])  # (N',): rows 1, 2 and 4 change, rows 0 and 3 stay
    moves = Moves(source)
    expected = buffer[:, :, :3].index_select(0, source)
    moved = moves.apply(buffer.clone(), 3)
    assert moves.changed.tolist() == [1, 2, 4]
    assert moved.shape == (5, 2, 8, 4) and torch.equal(moved[:, :, :3], expected)
