"""Generated protobuf code is up to date, and the API keeps its contract names."""

from __future__ import annotations

from attnserve.service import protogen
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb


def test_generated_code_matches_a_fresh_generation() -> None:
    assert protogen.stale_files() == [], (
        "run `python -m attnserve.service.protogen` and commit service/proto/"
    )


def test_every_enum_starts_with_unspecified() -> None:
    for enum in pb.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values_by_number[0].name.endswith("_UNSPECIFIED"), enum.name


def test_contract_field_names() -> None:
    request = pb.ClassifyRequest.DESCRIPTOR.fields_by_name
    assert {"model", "version", "texts"} <= set(request)
    assert "results" in pb.ClassifyResponse.DESCRIPTOR.fields_by_name
    assert "label" in pb.TextResult.DESCRIPTOR.fields_by_name
    service = pb.DESCRIPTOR.services_by_name["Classifier"]
    assert service.full_name == "attnserve.v1.Classifier"
    assert set(service.methods_by_name) == {"Classify", "ClassifyStream", "ListModels", "GetModel"}
    stream = service.methods_by_name["ClassifyStream"]
    assert stream.client_streaming and stream.server_streaming
    modes = {value.name for value in pb.AttentionMode.DESCRIPTOR.values}
    assert {f"ATTENTION_MODE_{m}" for m in ("NONE", "POOLED", "LAST_LAYER", "ALL", "ROLLOUT")} <= modes
