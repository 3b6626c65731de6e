"""A spinning session's threads stop spinning when its run returns (`runtime.session_options`).

Spinning keeps the intra-op threads hot between one run's parallel sections. onnxruntime
otherwise keeps them spinning for tens of milliseconds after the run too: at one call every
few milliseconds that is a core taken from the event loop, the batcher threads and the other
workers for good. Measured as the process's CPU while it sits idle after a few runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnserve.service.engine.models.runtime import session_options
from attnserve.service.engine.models.threads import available_cores
from tests.support.servers import make_settings

WIDTH, LAYERS, ROWS = 512, 8, 64
IDLE_S = 0.3


def compute_bound(path: Path) -> Path:
    """x [B, WIDTH] -> LAYERS MatMuls of WIDTH x WIDTH: work the intra-op threads split."""
    rng = np.random.default_rng(0)
    weights, nodes = [], []
    for layer in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{layer}"))
        nodes.append(
            helper.make_node("MatMul", [f"h{layer}" if layer else "x", f"w{layer}"], [f"h{layer + 1}"])
        )
    graph = helper.make_graph(
        nodes,
        "spinning",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info(f"h{LAYERS}", TensorProto.FLOAT, ["batch", WIDTH])],
        initializer=weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), path)
    return path


def idle_cpu_after_runs(path: Path, options: ort.SessionOptions) -> float:
    """CPU seconds the process uses in IDLE_S of sleep right after three runs."""
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = np.ones((ROWS, WIDTH), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    started = time.process_time()
    time.sleep(IDLE_S)
    return time.process_time() - started


@pytest.mark.skipif(available_cores(1) < 2, reason="one core: no intra-op thread to spin")
def test_a_spinning_sessions_threads_stop_when_its_run_returns(tmp_path: Path) -> None:
    graph = compute_bound(tmp_path / "model.onnx")
    served = idle_cpu_after_runs(graph, session_options(make_settings(tmp_path), 2, spinning=True))
    # The same threads and spinning without the entry: onnxruntime's own default.
    default = ort.SessionOptions()
    default.intra_op_num_threads, default.inter_op_num_threads = 2, 1
    default.add_session_config_entry("session.intra_op.allow_spinning", "1")
    unstopped = idle_cpu_after_runs(graph, default)
    assert unstopped > 0.005, f"onnxruntime no longer spins after a run ({unstopped * 1e3:.1f} ms idle CPU)"
    assert served < 0.005, f"{served * 1e3:.1f} ms of CPU in {IDLE_S * 1e3:.0f} ms idle after the runs"
