"""The fingerprint and the namespace id derived from it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest

from cache_protocol import is_namespace
from cache_protocol.fingerprint import REDACTED, differences
from tests.support.client_kit import FACTS
from xla_cache.frameworks.fingerprint import flags_digest
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import build_fingerprint

DESIGN_FIELDS = {
    "torch_xla_version",
    "torch_xla_git",
    "torch_version",
    "torch_git",
    "jax_version",
    "jaxlib_version",
    "device_type",
    "device_kind",
    "global_device_count",
    "process_count",
    "spmd",
    "process_index",
    "pjrt_plugins",
    "xla_flags_digest",
    "libtpu_init_args_digest",
}


def test_fingerprint_has_every_field_the_design_lists() -> None:
    fp = build_fingerprint(FACTS, env={"XLA_FLAGS": "--xla_foo=1"})
    assert set(fp) >= DESIGN_FIELDS
    assert fp["torch_xla_version"] == "2.7.0"
    assert fp["device_kind"] == "cpu"
    assert fp["process_index"] == 0
    assert fp["xla_flags_digest"] == flags_digest("--xla_foo=1")


def test_process_index_only_without_spmd() -> None:
    ranks = [build_fingerprint({**FACTS, "process_count": 4, "process_index": i}, env={}) for i in range(4)]
    assert len({namespace_id(fp) for fp in ranks}) == 4  # one namespace per process without SPMD
    hosts = [
        build_fingerprint({**FACTS, "spmd": True, "process_count": 4, "process_index": i}, env={})
        for i in range(4)
    ]
    assert {fp["process_index"] for fp in hosts} == {None}
    assert len({namespace_id(fp) for fp in hosts}) == 1  # SPMD hosts share


def test_flags_digest_reads_only_xla_tokens_and_their_effective_values() -> None:
    assert flags_digest(None) is None
    assert flags_digest("") is None
    assert flags_digest("--other=1 -v") is None
    base = flags_digest("--xla_a=1 --xla_b=2")
    assert base is not None
    assert flags_digest("--xla_b=2 --xla_a=1") == base  # order does not matter
    assert flags_digest("--xla_a=1 --other=7 --xla_b=2") == base  # non-XLA tokens ignored
    assert flags_digest("--xla_a=0 --xla_a=1 --xla_b=2") == base  # the last value wins, as in XLA
    assert flags_digest("--xla_a=1 --xla_b=3") != base
    assert flags_digest("--xla_a='1' --xla_b=2") == base  # shell quoting


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("torch_xla_version", "2.8.0"),
        ("torch_xla_git", "0" * 40),
        ("torch_version", "2.8.0"),
        ("torch_git", "1" * 40),
        ("jax_version", "0.4.38"),
        ("device_type", "TPU"),
        ("device_kind", "TPU v4"),
        ("global_device_count", 8),
        ("process_count", 2),
        ("spmd", True),
        ("process_index", 1),
        ("pjrt_plugins", {"libtpu": "0.0.12"}),
    ],
)
def test_every_runtime_fact_changes_the_namespace(field: str, value: Any) -> None:
    base = namespace_id(build_fingerprint(FACTS, env={}))
    assert namespace_id(build_fingerprint({**FACTS, field: value}, env={})) != base


@pytest.mark.parametrize("variable", ["XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_ACCELERATOR_TYPE"])
def test_environment_changes_the_namespace(variable: str) -> None:
    base = namespace_id(build_fingerprint(FACTS, env={}))
    assert namespace_id(build_fingerprint(FACTS, env={variable: "--xla_tpu_x=1"})) != base


def test_namespace_id_is_stable_and_valid() -> None:
    fp = build_fingerprint(FACTS, env={})
    reordered = dict(reversed(list(fp.items())))
    assert namespace_id(reordered) == namespace_id(fp)
    ns = namespace_id(fp)
    assert is_namespace(ns)
    assert ns.startswith("cpu-tx2.7.0-")
    # Pinned: the id is a documented function of the fingerprint; changing it strands every stored entry.
    # The flag maps are left out: the digests beside them are hashed.
    hashed = {k: v for k, v in fp.items() if k not in ("xla_flags", "libtpu_init_args")}
    canonical = json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()
    assert ns == "cpu-tx2.7.0-" + hashlib.sha256(canonical).hexdigest()[:32]


def test_odd_versions_still_give_a_valid_namespace() -> None:
    fp = build_fingerprint(
        {**FACTS, "torch_xla_version": "2.9.0+git/abc def", "device_type": "We!rd"}, env={}
    )
    assert is_namespace(namespace_id(fp))


def test_importing_the_client_never_imports_torch() -> None:
    code = (
        "import sys, xla_cache, xla_cache.cli, xla_cache.cli.doctor, xla_cache.transfer.uploader\n"
        "import xla_cache.transfer.download, xla_cache.transfer.upload, xla_cache.http.admin_api\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_xla'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# Computed by the code on main before the flag maps existed: the ids of these fingerprints must not change.
PINNED_FINGERPRINT = {
    "schema": 1,
    "framework": "jax",
    "jax_version": "0.10.2",
    "platform": "cpu",
    "xla_flags_digest": "32d0b3d7aaf09a701bc04099aa838afa707bde36f10d2d3d99aca760226a22bf",
    "libtpu_init_args_digest": None,
    "pjrt_plugins": {},
    "accelerator_type": None,
}
PINNED_ID = "cpu-jax0.10.2-84c7123524a68045be139eb4dfd98e0f"


def test_flag_maps_leave_the_namespace_id_as_it_was() -> None:
    assert namespace_id(PINNED_FINGERPRINT) == PINNED_ID
    with_maps = {
        **PINNED_FINGERPRINT,
        "xla_flags": {"--xla_cpu_enable_fast_math": "true"},
        "libtpu_init_args": {},
    }
    assert namespace_id(with_maps) == PINNED_ID
    assert namespace_id({**with_maps, "xla_flags": {"--xla_cpu_enable_fast_math": REDACTED}}) == PINNED_ID
    # the digests are those of before, so flags still part namespaces
    assert flags_digest("--xla_cpu_enable_fast_math=true") == PINNED_FINGERPRINT["xla_flags_digest"]
    assert flags_digest("--xla_b --xla_a=1 foo --xla_a=2") == (
        "54ee267f3a85ceca06a2973cb4f79781db8b838108f5360364ee0af57583e622"
    )
    assert flags_digest("--xla_dump_to='/tmp/a b' --xla_x=") == (
        "bc438cc1f339f1b48fbef607183981eeae1e4d742fb5c7aaa1c71cc8b9b7971c"
    )


def test_fingerprint_carries_the_normalised_flags_and_redacts_their_values_when_asked() -> None:
    env = {"XLA_FLAGS": "--xla_b --xla_a=1 -v --xla_a=2", "LIBTPU_INIT_ARGS": "--xla_tpu_x=7"}
    fp = build_fingerprint(FACTS, env=env)
    assert fp["xla_flags"] == {"--xla_a": "2", "--xla_b": None}
    assert list(fp["xla_flags"]) == ["--xla_a", "--xla_b"]
    assert fp["libtpu_init_args"] == {"--xla_tpu_x": "7"}
    hidden = build_fingerprint(FACTS, env={**env, "XLA_CACHE_REDACT_FLAG_VALUES": "1"})
    assert hidden["xla_flags"] == {"--xla_a": REDACTED, "--xla_b": None}
    assert hidden["libtpu_init_args"] == {"--xla_tpu_x": REDACTED}
    assert "7" not in json.dumps(hidden["libtpu_init_args"])
    assert namespace_id(hidden) == namespace_id(fp)
    assert build_fingerprint(FACTS, env={})["xla_flags"] == {}


# Computed by the code on main before the torch_xla settings were recorded: a job that sets none of them (or
# sets one to what torch_xla takes anyway) keeps these ids.
PINNED_TORCH_XLA = {
    "cpu": "cpu-tx2.7.0-51bc501a5cdaaec4b77d91d064d41718",
    "tpu_v4": "tpu-tx2.7.0-72a98fccd7a95e1e640d1540975a09de",
}
TPU_V4 = {**FACTS, "device_type": "TPU", "device_kind": "TPU v4"}


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"XLA_HLO_DEBUG": "", "XLA_IR_DEBUG": ""},  # empty: torch_xla hashes "" as for unset
        {"XLA_USE_BF16": "0", "XLA_USE_32BIT_LONG": "false", "XLA_DOWNCAST_BF16": "0"},
        {"XLA_ENABLE_PARAM_ALIASING": "true", "XLA_DENSE_SCATTER_FACTOR": "100"},  # their defaults
        {
            "XLA_DENSE_GATHER_FACTOR": "8192",
            "XLA_MAX_PADDING_FACTOR": "1.250",
            "XLA_RESIZE_SPLIT_FACTOR": "3",
        },
        {
            "XLA_USE_EAGER_DEBUG_MODE": "0",
            "XLA_LAYOUTS": "",
            "XLA_PERSISTENT_CACHE_PATH": "/x",
            "PT_XLA_DEBUG": "1",
        },
    ],
)
def test_unset_or_default_torch_xla_settings_keep_the_namespace_id(env: dict[str, str]) -> None:
    fp = build_fingerprint(FACTS, env=env)
    assert namespace_id(fp) == PINNED_TORCH_XLA["cpu"]
    assert not any(name.isupper() for name in fp)


def test_torch_xla_s_own_megacore_default_on_tpu_v4_keeps_the_namespace_id() -> None:
    env = {"TPU_MEGACORE": "megacore_dense", "XLA_FLAGS": "--xla_a=1"}
    assert namespace_id(build_fingerprint(TPU_V4, env=env)) == PINNED_TORCH_XLA["tpu_v4"]
    # anywhere else, or another value, it is a setting of its own (torch_xla hashes it into every key)
    assert build_fingerprint(TPU_V4, env={**env, "TPU_MEGACORE": "megacore"})["TPU_MEGACORE"] == "megacore"
    assert build_fingerprint(FACTS, env=env)["TPU_MEGACORE"] == "megacore_dense"


@pytest.mark.parametrize(
    ("env", "fields"),
    [
        ({"XLA_HLO_DEBUG": "1"}, {"XLA_HLO_DEBUG": "1"}),
        ({"XLA_IR_DEBUG": "1"}, {"XLA_IR_DEBUG": "1"}),
        # torch_xla hashes these raw: "0" and "true" are keys of their own, so namespaces of their own
        ({"XLA_HLO_DEBUG": "0"}, {"XLA_HLO_DEBUG": "0"}),
        ({"XLA_HLO_DEBUG": "true"}, {"XLA_HLO_DEBUG": "true"}),
        # read as booleans (GetEnvBool: "true", "false", else atoi != 0): one spelling each
        ({"XLA_USE_BF16": "true"}, {"XLA_USE_BF16": "1"}),
        ({"XLA_USE_BF16": "01"}, {"XLA_USE_BF16": "1"}),
        ({"XLA_USE_32BIT_LONG": "1"}, {"XLA_USE_32BIT_LONG": "1"}),
        ({"XLA_DOWNCAST_BF16": "1"}, {"XLA_DOWNCAST_BF16": "1"}),
        ({"XLA_ENABLE_PARAM_ALIASING": "false"}, {"XLA_ENABLE_PARAM_ALIASING": "0"}),
        ({"XLA_STABLEHLO_COMPILE": "1"}, {"XLA_STABLEHLO_COMPILE": "1"}),
        ({"XLA_DISABLE_FUNCTIONALIZATION": "1"}, {"XLA_DISABLE_FUNCTIONALIZATION": "1"}),
        ({"XLA_NO_SPECIAL_SCALARS": "1"}, {"XLA_NO_SPECIAL_SCALARS": "1"}),
        (
            {"XLA_AUTO_SPMD": "1", "XLA_AUTO_SPMD_MESH": "2,2"},
            {"XLA_AUTO_SPMD": "1", "XLA_AUTO_SPMD_MESH": "2,2"},
        ),
        # numbers as C reads them (atol / atof)
        ({"XLA_DENSE_GATHER_FACTOR": " 100x"}, {"XLA_DENSE_GATHER_FACTOR": "100"}),
        ({"XLA_MAX_PADDING_FACTOR": "2"}, {"XLA_MAX_PADDING_FACTOR": "2.0"}),
        ({"XLA_USE_EAGER_DEBUG_MODE": "1"}, {"XLA_USE_EAGER_DEBUG_MODE": "1"}),
    ],
)
def test_torch_xla_settings_are_fields_of_their_own_namespace(
    env: dict[str, str], fields: dict[str, str]
) -> None:
    fp = build_fingerprint(FACTS, env=env)
    assert {k: v for k, v in fp.items() if k.isupper()} == fields
    assert namespace_id(fp) != PINNED_TORCH_XLA["cpu"]


def test_equivalent_spellings_of_a_torch_xla_setting_share_a_namespace() -> None:
    ids = {namespace_id(build_fingerprint(FACTS, env={"XLA_USE_BF16": v})) for v in ("1", "true", "7", "01")}
    assert len(ids) == 1
    ids = {
        namespace_id(build_fingerprint(FACTS, env={"XLA_MAX_PADDING_FACTOR": v})) for v in ("2", "2.0", "2e0")
    }
    assert len(ids) == 1


def test_a_torch_xla_setting_is_named_as_it_differs() -> None:
    ours = build_fingerprint(FACTS, env={"XLA_HLO_DEBUG": "1", "XLA_FLAGS": "--xla_a=1"})
    theirs = build_fingerprint(FACTS, env={"XLA_FLAGS": "--xla_a=1"})
    count, found = differences(ours, theirs)
    assert count == 1
    assert [(d.field, d.text) for d in found] == [("XLA_HLO_DEBUG", "1 (theirs: unset)")]
