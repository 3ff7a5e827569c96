"""Bodies of the run routes: the report a job sends (``POST /v1/runs``, the contract of
:mod:`cache_protocol.runs`: strict bounds, no unknown field) and the runs the admin routes answer with."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    create_model,
    field_validator,
    model_validator,
)

from cache_protocol.runs import (
    HOST_MAX_LENGTH,
    MAX_COUNT,
    MAX_HITS_PER_REPORT,
    MAX_MISSES_PER_REPORT,
    MAX_PROCESS_INDEX,
    MAX_SECONDS,
    MISS_ADVICE,
    MODULE_MAX_LENGTH,
    REPORTED_NUMBERS,
    RUN_ID_PATTERN,
    RUN_NUMBERS,
    SOURCE_MAX_LENGTH,
    Framework,
    milliseconds,
)
from cache_protocol.text import unprintable
from cache_server.api.schemas import bounded_fingerprint
from cache_server.domain.runs import MissRecord, RunInfo
from cache_server.names import check_key, check_namespace
from cache_server.runs.ingest import RunDetail, RunReport
from cache_server.runs.reasons import ExplainedMiss

__all__ = ["RunDetailOut", "RunOut", "RunReportIn", "RunsOut"]

Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
# Numbers are JSON numbers: "1.5", a string, is refused (strict), an integer taken as seconds too.
Seconds = Annotated[StrictFloat, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
UnixTime = Annotated[StrictFloat, Field(ge=0, le=2**34, allow_inf_nan=False, description="Unix seconds.")]
MAX_COMPONENTS = 32
ComponentName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_. -]+$")]
ComponentHash = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


def _printable(text: str) -> str:
    """Free text an operator reads: no control, format or separator character (:mod:`cache_protocol.text`)."""
    problem = unprintable(text)
    if problem:
        raise ValueError(problem)
    return text


Printable = AfterValidator(_printable)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MissIn(_Strict):
    """A compile the run made: the key it wrote and what the client knew of it."""

    key: str = Field(min_length=1, max_length=256)
    module: Annotated[str, Printable] | None = Field(default=None, min_length=1, max_length=MODULE_MAX_LENGTH)
    components: dict[ComponentName, ComponentHash] | None = Field(default=None, max_length=MAX_COMPONENTS)
    compile_seconds: Seconds | None = None
    load_failed: StrictBool = False
    source: Annotated[str, Printable] | None = Field(
        default=None,
        min_length=1,
        max_length=SOURCE_MAX_LENGTH,
        description="Where the job compiled it, file:line (torch_xla: the call site of its mark_step/sync).",
    )

    @model_validator(mode="after")
    def _key(self) -> MissIn:
        check_key(self.key)  # InvalidName: the one error mapping answers 400
        return self


class _ReportFields(_Strict):
    """One report of a run (cumulative numbers; the misses not reported before)."""

    run_id: str = Field(min_length=8, max_length=64, pattern=f"^{RUN_ID_PATTERN.pattern}$")
    namespace: str = Field(min_length=1, max_length=128)
    framework: Framework
    host: Annotated[str, Printable] = Field(min_length=1, max_length=HOST_MAX_LENGTH)
    process_index: StrictInt = Field(default=0, ge=0, le=MAX_PROCESS_INDEX)
    started_at: UnixTime
    ended_at: UnixTime | None = None
    new_misses: list[MissIn] = Field(default_factory=list, max_length=MAX_MISSES_PER_REPORT)
    hit_keys: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list,
        max_length=MAX_HITS_PER_REPORT,
        description="The entries the run loaded since its last report: each saved what it cost to compile.",
    )
    runtime: dict[str, Any] | None = Field(
        default=None,
        description="The components of JAX's cache key the run saw (platform version, topology, device ids "
        "and coordinates, flag digests, compression, jax_persistent_cache_enable_xla_caches): what a prefill "
        "compares its target with. Bounded as a fingerprint.",
    )

    @field_validator("runtime")
    @classmethod
    def _bounded_runtime(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else bounded_fingerprint(value)

    @model_validator(mode="after")
    def _consistent(self) -> _ReportFields:
        check_namespace(self.namespace)
        for key in self.hit_keys:
            check_key(key)  # InvalidName: 400
        if len(set(self.hit_keys)) != len(self.hit_keys):
            raise ValueError("hit_keys names a key twice")
        if self.ended_at is not None and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        if len({miss.key for miss in self.new_misses}) != len(self.new_misses):
            raise ValueError("new_misses names a key twice")
        return self

    def report(self) -> RunReport:
        """The report as the service takes it."""
        return RunReport(
            run_id=self.run_id,
            namespace=self.namespace,
            framework=self.framework,
            host=self.host,
            process_index=self.process_index,
            started_at=_time(self.started_at),
            ended_at=None if self.ended_at is None else _time(self.ended_at),
            numbers={number.name: getattr(self, number.name) for number in REPORTED_NUMBERS},
            new_misses=[
                MissRecord(
                    key=m.key,
                    module=m.module,
                    components=m.components,
                    compile_ms=None if m.compile_seconds is None else milliseconds(m.compile_seconds),
                    load_failed=m.load_failed,
                    source=m.source,
                )
                for m in self.new_misses
            ],
            hit_keys=tuple(self.hit_keys),
            runtime=self.runtime,
        )


def _reported(unit: str) -> tuple[Any, Any]:
    return (Seconds, 0.0) if unit == "seconds" else (Count, 0)


if TYPE_CHECKING:
    RunReportIn = _ReportFields
else:  # the report's fields and, each optional, its numbers (cache_protocol.runs.REPORTED_NUMBERS)
    RunReportIn = create_model(
        "RunReportIn",
        __base__=_ReportFields,
        __doc__=_ReportFields.__doc__,
        **{number.name: _reported(number.unit) for number in REPORTED_NUMBERS},
    )


def _time(unix: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc)


class _RunIdentity(BaseModel):
    run_id: str
    namespace: str
    framework: str
    host: str
    process_index: int
    started_at: dt.datetime
    updated_at: dt.datetime
    ended_at: dt.datetime | None
    hit_rate: float | None
    runtime: dict[str, Any] | None = None


_SHOWN = tuple(number for number in RUN_NUMBERS if number.name != "misses")
"""The numbers every run shows as they are (``misses``: RunOut's count, RunDetailOut's page of them)."""

if TYPE_CHECKING:
    _RunFields = _RunIdentity
else:
    _RunFields = create_model(
        "_RunFields",
        __base__=_RunIdentity,
        **{number.name: (float if number.unit == "seconds" else int, ...) for number in _SHOWN},
    )


def _run_fields(run: RunInfo) -> dict[str, object]:
    n = run.numbers
    looked = n.hits + n.misses
    shown = n.shown()
    return {
        "run_id": run.run_id,
        "namespace": run.namespace,
        "framework": run.framework,
        "host": run.host,
        "process_index": run.process_index,
        "started_at": run.started_at,
        "updated_at": run.updated_at,
        "ended_at": run.ended_at,
        "hit_rate": n.hits / looked if looked else None,
        "runtime": run.runtime,
        **{number.name: shown[number.name] for number in _SHOWN},
    }


class RunOut(_RunFields):
    """A run: who, where, when, and its numbers (seconds as numbers; the hit rate of its lookups,
    ``hits / (hits + misses)``; ``saved_seconds`` the compile time its hits saved: what each entry it
    loaded cost to compile)."""

    misses: int

    @classmethod
    def of(cls, run: RunInfo) -> RunOut:
        return cls.model_validate({**_run_fields(run), "misses": run.numbers.misses})


class RunsOut(BaseModel):
    runs: list[RunOut]


class DifferingDimensionOut(BaseModel):
    param: int
    dim: int
    ours: int
    theirs: int


class ComponentOut(BaseModel):
    component: str
    ours: str | None
    theirs: str | None


class BakedSizeOut(BaseModel):
    """A size inside the graph that differs from the nearest stored entry of the same structure: the op
    (its name in the HLO, opcode, op name and source line from its metadata), the attribute (``limit``,
    ``high``, ``shape``, ``value``...) at dimension ``index``, our value and the stored one."""

    op: str
    opcode: str
    op_name: str | None
    source: str | None
    attribute: str
    index: int
    ours: float | None = Field(description="Null where this side's attribute has fewer dimensions.")
    theirs: float | None


class MissOut(BaseModel):
    """A compile of the run and why it happened (``reason`` one of cache_protocol.runs.MISS_REASONS)."""

    key: str
    module: str | None
    reason: str
    detail: str
    compile_seconds: float | None
    load_failed: bool
    components: dict[str, str] | None
    shapes: str | None
    nearest_key: str | None
    dimensions: list[DifferingDimensionOut]
    differing_components: list[ComponentOut]
    removed_at: dt.datetime | None
    policy: str | None
    baked_sizes: list[BakedSizeOut]
    more: int = Field(
        description="Sizes (baked_sizes) or dimensions that differ beyond the 16 listed: counted, not listed."
    )
    advice: str
    source: str | None = Field(
        default=None,
        description="Where the job compiled it, file:line, as its client reported (torch_xla: the call site "
        "of the mark_step/sync that compiled it; no debug setting needed).",
    )

    @classmethod
    def of(cls, miss: ExplainedMiss) -> MissOut:
        return cls(
            key=miss.key,
            module=miss.module,
            reason=miss.reason,
            detail=miss.detail,
            compile_seconds=None if miss.compile_ms is None else miss.compile_ms / 1000,
            load_failed=miss.load_failed,
            components=miss.components,
            shapes=miss.shapes,
            nearest_key=miss.nearest_key,
            dimensions=[
                DifferingDimensionOut(param=d.param, dim=d.dim, ours=d.ours, theirs=d.theirs)
                for d in miss.dimensions
            ],
            differing_components=[
                ComponentOut(component=c.component, ours=c.ours, theirs=c.theirs)
                for c in miss.differing_components
            ],
            removed_at=miss.removed_at,
            policy=miss.policy,
            advice=MISS_ADVICE.get(miss.reason, ""),
            source=miss.source,
            baked_sizes=[
                BakedSizeOut(
                    op=c.op.name,
                    opcode=c.op.opcode,
                    op_name=c.op.op,
                    source=c.op.source,
                    attribute=c.attribute,
                    index=c.index,
                    ours=c.ours,
                    theirs=c.theirs,
                )
                for c in miss.baked
            ],
            more=miss.more,
        )


class RunDetailOut(_RunFields):
    """A run's fields, with ``misses`` a page of its compiles (``offset`` to ``offset + limit``, in the order
    reported) each with its reason, ``misses_total`` how many it reported in all, ``misses_stored`` how many
    have a row (the rest past the run's bound are counted only), ``misses_explained`` how many listed have a
    reason other than unknown, ``reasons`` the count of each reason over the ``reasons_counted`` misses a
    detail has listed so far (each listed miss's reason is kept with it: counting explains nothing again),
    and ``graphs`` the bucketing report's URL of each module
    listed."""

    misses: list[MissOut]
    misses_total: int
    misses_explained: int
    offset: int
    misses_stored: int
    reasons: dict[str, int]
    reasons_counted: int
    advice: dict[str, str] = Field(description="What to do about each reason counted in ``reasons``.")
    graphs: dict[str, str]

    @classmethod
    def of(cls, detail: RunDetail) -> RunDetailOut:
        namespace = detail.run.namespace
        modules = sorted({m.module for m in detail.misses if m.module})
        return cls.model_validate(
            {
                **_run_fields(detail.run),
                "misses": [MissOut.of(m) for m in detail.misses],
                "misses_total": detail.misses_total,
                "misses_explained": detail.misses_explained,
                "offset": detail.offset,
                "misses_stored": detail.misses_stored,
                "reasons": detail.reasons,
                "reasons_counted": detail.counted,
                "advice": {reason: MISS_ADVICE[reason] for reason in detail.reasons if reason in MISS_ADVICE},
                "graphs": {module: graphs_url(namespace, module) for module in modules},
            }
        )


def graphs_url(namespace: str, module: str) -> str:
    """The bucketing report of one graph: ``/admin/graphs?namespace=NS&module=M``."""
    return "/admin/graphs?" + urlencode({"namespace": namespace, "module": module})
