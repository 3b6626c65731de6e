"""A session's outputs belong to the caller, not to onnxruntime's arena.

onnxruntime hands back numpy views of its arena's chunks; a reply still holding one while the
next batch runs pins the chunk and makes the arena grow (docs/reliability.md, "The onnxruntime
arena and the batch token budget"). `RuntimeSession.run` returns arrays that own their memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnserve.service.engine.models.runtime import create_session, pad_ids
from tests.support.servers import make_settings


def test_outputs_own_their_memory_and_survive_the_next_run(
    exported_bundle: Callable[[str], Path], tmp_path: Path
) -> None:
    session = create_session(
        exported_bundle("transformer") / "model.onnx", make_settings(tmp_path), intra_op_threads=1
    )
    assert session.shrinks  # the CPU arena is on: the case the copy is for
    ids, mask = pad_ids([[5, 6, 7], [8, 9]], pad_id=0)
    first = session.run(ids, mask, attention=True)
    kept = [output.copy() for output in first]
    assert [output.shape[0] for output in first] == [2, 2]
    for output in first:
        assert output.flags.owndata and output.base is None, type(output.base)
    # Runs on other shapes reuse the arena's memory; what the first run returned is unchanged.
    for width in (1, 4, 9):
        session.run(*pad_ids([[3] * width] * 3, pad_id=0), attention=True)
    for output, copy in zip(first, kept, strict=True):
        np.testing.assert_array_equal(output, copy)


def test_rows_handed_over_unpadded_run_as_their_padded_batch(
    exported_bundle: Callable[[str], Path], tmp_path: Path
) -> None:
    """The runner hands a batch's rows over unpadded: the session pads them as `pad_ids` does
    and hands back the ids and mask it fed, beside the same outputs."""
    session = create_session(
        exported_bundle("transformer") / "model.onnx", make_settings(tmp_path), intra_op_threads=1
    )
    rows = [[5, 6, 7], [8, 9]]
    outputs, ids, mask = session.run_rows(rows, 0, 3, True)
    padded, padded_mask = pad_ids(rows, pad_id=0)
    np.testing.assert_array_equal(ids, padded)
    np.testing.assert_array_equal(mask, padded_mask)
    for output, expected in zip(outputs, session.run(padded, padded_mask, attention=True), strict=True):
        np.testing.assert_array_equal(output, expected)
