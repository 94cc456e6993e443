"""ProcessWorkers under a worker's bad result: one worker's result of another shape is left out (the round decodes
from the others, equal to the in-process module with the round's mask), a model returning None is the model-output
error at once, naming the worker; and a closed pool says so."""

from __future__ import annotations

import time

import pytest
import torch
from processes import WorkerFault

from torchgcc import CodedModule, make_code
from torchgcc.workers import ProcessWorkers, WaitPolicy

pytestmark = pytest.mark.distributed


def test_a_worker_result_of_another_shape_is_left_out_and_a_closed_pool_says_so():
    model = WorkerFault(2, "shape").eval()
    code = make_code("gcc", num_inputs=2, num_workers=4, lambda_dec="spacing")
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    with ProcessWorkers(model, 4) as pool:
        coded = CodedModule(model, code, workers=pool, wait=WaitPolicy(1, timeout_s=60.0))
        for _ in range(2):
            with torch.no_grad():
                got = coded(x)
                expected = CodedModule(model, code)(x, mask=coded.last_mask)
            assert coded.last_mask[:, 2].tolist() == [False] * 3 and int(coded.last_mask[0].sum()) == 3
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError, match="ProcessWorkers is closed"):
        coded(x)


def test_a_model_returning_none_in_a_worker_is_the_model_output_error_at_once():
    model = WorkerFault(1, "none").eval()
    code = make_code("gcc", num_inputs=2, num_workers=4, lambda_dec="spacing")
    with ProcessWorkers(model, 4) as pool:
        coded = CodedModule(model, code, workers=pool, wait=WaitPolicy(0, timeout_s=20.0))
        start = time.monotonic()
        with pytest.raises(TypeError, match=r"worker 1's result: .*got NoneType"):
            coded(torch.randn(4, 3))
        assert time.monotonic() - start < 10.0


@pytest.mark.parametrize(("num_workers", "error"), [(0, ValueError), (2.5, ValueError), ("4", TypeError)])
def test_process_workers_check_num_workers(num_workers, error):
    with pytest.raises(error, match="num_workers"):
        ProcessWorkers(torch.nn.Linear(3, 2), num_workers)
