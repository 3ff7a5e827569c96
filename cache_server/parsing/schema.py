"""The part of XLA's schema this package reads, written down by field number (no XLA source is used): the
element types of ``xla_data.proto`` and the fields of the HLO module, computation, instruction, shape,
metadata and literal messages that :mod:`~cache_server.parsing.hlo` and
:mod:`~cache_server.parsing.instructions` read. A field not named here is skipped unread (or, for the
digests, taken as raw bytes).
"""

from __future__ import annotations

__all__ = [
    "COMPUTATION",
    "ELEMENT_BYTES",
    "ELEMENT_TYPES",
    "FRAME",
    "INSTRUCTION",
    "LITERAL_FIXED",
    "LITERAL_VARINT",
    "LOCATION",
    "METADATA",
    "MODULE",
    "PADDING_DIMENSION",
    "SHAPE",
    "SLICE_DIMENSION",
    "STACK_FRAMES",
    "TUPLE",
]

# xla.PrimitiveType numbers (xla_data.proto).
ELEMENT_TYPES = {
    1: "pred",
    2: "s8",
    3: "s16",
    4: "s32",
    5: "s64",
    6: "u8",
    7: "u16",
    8: "u32",
    9: "u64",
    10: "f16",
    11: "f32",
    12: "f64",
    13: "tuple",
    14: "opaque",
    15: "c64",
    16: "bf16",
    17: "token",
    18: "c128",
    19: "f8e5m2",
    20: "f8e4m3fn",
    21: "s4",
    22: "u4",
    23: "f8e4m3b11fnuz",
    24: "f8e5m2fnuz",
    25: "f8e4m3fnuz",
    26: "s2",
    27: "u2",
    28: "f8e4m3",
    29: "f8e3m4",
    30: "s1",
    31: "u1",
    32: "f4e2m1fn",
    33: "f8e8m0fnu",
}
TUPLE = 13

# Bytes per element, for what padding costs (sub-byte types count as a byte; pred as one).
ELEMENT_BYTES = {
    name: size
    for names, size in (
        (("pred", "s8", "u8", "s4", "u4", "s2", "u2", "s1", "u1", "f4e2m1fn"), 1),
        (("s16", "u16", "f16", "bf16"), 2),
        (("s32", "u32", "f32"), 4),
        (("s64", "u64", "f64", "c64"), 8),
        (("c128",), 16),
    )
    for name in names
} | {name: 1 for name in ELEMENT_TYPES.values() if name.startswith("f8")}

# HloModuleProto
MODULE = {
    "name": 1,
    "entry_computation_name": 2,
    "computations": 3,
    "host_program_shape": 4,
    "stack_frame_index": 17,
}
# HloComputationProto
COMPUTATION = {"name": 1, "instructions": 2, "program_shape": 4}
# HloInstructionProto
INSTRUCTION = {
    "name": 1,
    "opcode": 2,
    "shape": 3,
    "metadata": 7,
    "literal": 8,
    "slice_dimensions": 17,
    "dynamic_slice_sizes": 20,
    "padding_config": 21,
    "gather_slice_sizes": 34,
    "frontend_attributes": 68,
    "statistics_viz": 82,
    "original_value": 88,
}
# ShapeProto
SHAPE = {"element_type": 2, "dimensions": 3, "tuple_shapes": 4, "is_dynamic_dimension": 6}
# OpMetadata
METADATA = {"op_type": 1, "op_name": 2, "source_file": 3, "source_line": 4, "stack_frame_id": 15}
# HloInstructionProto.SliceDimensions
SLICE_DIMENSION = {"start": 1, "limit": 2, "stride": 3}
# PaddingConfig.PaddingConfigDimension (PaddingConfig's field 1 repeats it)
PADDING_DIMENSION = {"low": 1, "high": 2, "interior": 3}
# LiteralProto: the integer arrays (varints) and the floating-point ones (fixed width: format, bytes)
LITERAL_VARINT = {"preds": 2, "s32s": 4, "s64s": 5, "u32s": 6, "u64s": 7}  # (u8s, field 3, is bytes)
LITERAL_FIXED = {"f32s": (8, "<f", 4), "f64s": (9, "<d", 8)}
# StackFrameIndexProto (a module's source locations, which metadata's stack_frame_id points into)
STACK_FRAMES = {"file_names": 1, "function_names": 2, "file_locations": 3, "stack_frames": 4}
LOCATION = {"file_name_id": 1, "function_name_id": 2, "line": 3}
FRAME = {"file_location_id": 1, "parent_frame_id": 2}
