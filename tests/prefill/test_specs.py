"""The calls a prefill takes: a specs file as the docs show it is read as written, and each kind of bad
input is refused with a message naming the call, the argument and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xla_cache.prefill.specs import SpecsError, describe, load_specs, normalize_calls


def write(tmp_path: Path, body: Any) -> Path:
    path = tmp_path / "specs.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def test_the_documented_specs_file_is_read_as_written(tmp_path: Path) -> None:
    sharded = {
        "shape": [16, 128],
        "dtype": "bfloat16",
        "sharding": {"mesh": {"data": 4}, "spec": ["data", None]},
    }
    body = {
        "function": "model.steps:train_step",
        "calls": [[{"shape": [8, 128], "dtype": "float32"}, {"shape": [8], "dtype": "int32"}], [sharded, 3]],
    }
    specs = load_specs(write(tmp_path, body))
    assert specs.function == "model.steps:train_step"
    assert specs.calls == body["calls"]
    assert [describe(call) for call in specs.calls] == [
        "(8,128) float32, (8) int32",
        "(16,128) bfloat16 sharded, 3",
    ]
    assert load_specs(write(tmp_path, body["calls"])).calls == body["calls"]  # the list alone


class Struct:
    shape = (2, 3)
    dtype = "float32"


def test_shape_dtype_structs_are_taken_as_specs() -> None:
    assert normalize_calls([[Struct(), None]]) == [[{"shape": [2, 3], "dtype": "float32"}, None]]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("{not json", "is not JSON"),
        ({"calls": [], "extra": 1}, "unknown field(s) extra"),
        ({"calls": []}, "there are no calls to compile"),
        ({"calls": [{"shape": [1]}]}, "call 0: must be a list of arguments, not dict"),
        ({"calls": [[{"shape": "8x8"}]]}, "call 0, argument 0: shape must be a list of integers"),
        ({"calls": [[{"shape": [8, -1]}]]}, "call 0, argument 0: shape [8, -1] has a negative dimension"),
        ({"calls": [[{"shape": [8], "dtype": 3}]]}, "dtype must be a name such as float32"),
        ({"calls": [[{"shape": [8], "device": "tpu"}]]}, "unknown field(s) device"),
        ({"calls": [[{"shape": [8], "sharding": {"spec": []}}]]}, "sharding must be"),
        ({"calls": [[{"shape": [8], "sharding": {"mesh": {"x": 0}}}]]}, "positive sizes"),
        ({"calls": [[[1, 2]]]}, "call 0, argument 0: list is neither an array spec nor a value"),
        ({"function": 3, "calls": [[1]]}, "function must be 'module:function'"),
    ],
)
def test_bad_specs_are_refused_saying_where_and_why(tmp_path: Path, body: Any, said: str) -> None:
    with pytest.raises(SpecsError) as refused:
        load_specs(write(tmp_path, body))
    assert said in str(refused.value) and "specs.json" in str(refused.value)


def test_a_missing_specs_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecsError, match=r"cannot read the specs file .*absent\.json"):
        load_specs(tmp_path / "absent.json")
