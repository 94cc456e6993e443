"""Collection hooks for the whole suite (shared fixtures and helpers live in tests/helpers.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """torch's intra-op thread count as it was before each test: the commands that tests run in-process set
    ``--threads`` for the whole process (tests/distributed/test_serve_bench.py runs serve-bench with ``--threads 1``),
    and a later test in the same worker would otherwise run at that count (test_decode_plan's op counts, say, depend
    on it). Restoring it calls ``torch.set_num_threads``, after which torch's batched CPU LU (MKL) at n >= 160 hangs
    or errs for the rest of the worker (torchgcc/functional/kernel.py): dense references use numpy or scipy."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``CodeContract``'s CUDA test carries the ``cuda`` marker like tests/test_cuda.py's (torchgcc.testing does not
    import pytest, so it cannot mark it itself): ``pytest -m cuda`` in benchmarks/gpu_check.sh selects it."""
    for item in items:
        if item.name.startswith("test_cuda_decode_matches_cpu"):
            item.add_marker(pytest.mark.cuda)
