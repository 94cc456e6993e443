import pytest

from torchgcc.codes import CODES, list_codes
from torchgcc.registry import Registry


def test_register_lookup_and_errors():
    registry = Registry[int]("shape")
    assert registry.register("square", 4) == 4

    @registry.register("triangle")
    def three() -> int:
        return 3

    assert registry["square"] == 4 and registry["triangle"] is three
    assert registry.names() == ["square", "triangle"] and list(registry) == registry.names() and "square" in registry
    with pytest.raises(ValueError, match="a shape named 'square' is already registered"):
        registry.register("square", 5)
    with pytest.raises(ValueError, match=r"unknown shape 'circle' \(registered: square, triangle\)"):
        registry["circle"]


def test_lookups_ignore_case_and_suggest_close_names():
    registry = Registry[int]("shape")
    registry.register("square", 4)
    registry.register("triangle", 3)
    assert registry["SQUARE"] == 4 and "Triangle" in registry and 4 not in registry
    with pytest.raises(ValueError, match="already registered"):
        registry.register("Square", 5)
    with pytest.raises(ValueError, match=r"unknown shape 'sqare'; did you mean 'square'\?"):
        registry["sqare"]


def test_make_code_accepts_any_case_and_suggests():
    import torchgcc

    assert type(torchgcc.make_code("GCC", num_inputs=4, num_workers=12)) is torchgcc.GCC
    with pytest.raises(ValueError, match="did you mean 'bacc'"):
        torchgcc.make_code("bac", num_inputs=4, num_workers=12)


def test_the_codes_registry_lists_every_code():
    assert list_codes() == ["bacc", "gcc", "lcc", "natural", "replication", "uncoded"] == CODES.names()
