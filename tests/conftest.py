"""Collection hooks for the whole suite (shared fixtures and helpers live in tests/helpers.py)."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``CodeContract``'s CUDA test carries the ``cuda`` marker like tests/test_cuda.py's (torchgcc.testing does not
    import pytest, so it cannot mark it itself): ``pytest -m cuda`` in benchmarks/gpu_check.sh selects it."""
    for item in items:
        if item.name.startswith("test_cuda_decode_matches_cpu"):
            item.add_marker(pytest.mark.cuda)
