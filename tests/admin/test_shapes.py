"""Recorded shapes read back (cache_server.graphs.shapes): the flat parameter lists a graph's thousands of
variants have (parsed by the fast path) and the tuple parameters and malformed texts (the careful one)."""

from __future__ import annotations

from cache_server.graphs.shapes import Shape, parse_shape_signature


def test_a_flat_parameter_list() -> None:
    signature = parse_shape_signature("(f32[32,32], f32[<=8,32], s64[], pred[3]) -> (f32[64,32])")
    assert signature is not None
    assert signature.params == (
        Shape("f32", (32, 32), (False, False)),
        Shape("f32", (8, 32), (True, False)),
        Shape("s64", (), ()),
        Shape("pred", (3,), (False,)),
    )
    assert signature.result == "(f32[64,32])"


def test_tuple_parameters_are_flattened_in_order() -> None:
    signature = parse_shape_signature("((f32[1,2], s64[3]), bf16[4]) -> (f32[1])")
    assert signature is not None
    assert [(s.element, s.dims) for s in signature.params] == [("f32", (1, 2)), ("s64", (3,)), ("bf16", (4,))]


def test_texts_not_of_that_form_read_as_none() -> None:
    for text in (
        None,
        "",
        "f32[1] -> f32[1]",
        "(f32[1], , f32[2]) -> (f32[1])",
        "(f32[x]) -> (f32[1])",
        "(f32) -> ()",
    ):
        assert parse_shape_signature(text) is None, text
    empty = parse_shape_signature("() -> (f32[1])")
    assert empty is not None and empty.params == ()
