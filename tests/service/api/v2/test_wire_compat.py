"""Our inference.proto against tritonclient's own compiled descriptors: every message, field,
enum value and method we declare must exist there with the same number, type and shape.

The comparison runs in the tools environment (tritonclient's descriptors cannot be loaded
beside ours); this process sends it a description of our file as JSON.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor

from attnserve.service.proto.inference import grpc_service_pb2 as pb

COMPARE = r"""
import json, sys
from google.protobuf import descriptor_pool
import tritonclient.grpc.service_pb2, tritonclient.grpc.model_config_pb2  # register descriptors

ours = json.load(sys.stdin)
pool = descriptor_pool.Default()
problems = []
for name, fields in ours["messages"].items():
    try:
        theirs = pool.FindMessageTypeByName(name)
    except KeyError:
        problems.append(f"message {name} is unknown to tritonclient")
        continue
    for field, (number, kind, repeated, type_name) in fields.items():
        other = theirs.fields_by_name.get(field)
        if other is None:
            problems.append(f"{name}.{field} is unknown to tritonclient")
            continue
        other_type = other.message_type or other.enum_type
        repeats = other.label == other.LABEL_REPEATED
        got = [other.number, other.type, repeats, other_type.full_name if other_type else ""]
        if got != [number, kind, repeated, type_name]:
            problems.append(f"{name}.{field}: ours {[number, kind, repeated, type_name]}, tritonclient {got}")
for name, values in ours["enums"].items():
    theirs = pool.FindEnumTypeByName(name)
    for value, number in values.items():
        if value not in theirs.values_by_name or theirs.values_by_name[value].number != number:
            problems.append(f"enum {name}.{value} = {number} differs in tritonclient")
service = pool.FindServiceByName(ours["service"])
for method, signature in ours["methods"].items():
    other = service.methods_by_name.get(method)
    got = other and [other.input_type.full_name, other.output_type.full_name,
                     other.client_streaming, other.server_streaming]
    if got != signature:
        problems.append(f"rpc {method}: ours {signature}, tritonclient {got}")
json.dump(problems, sys.stdout)
"""


def _messages(descriptor: Descriptor, into: dict[str, Any]) -> None:
    fields = {}
    for field in descriptor.fields:
        if field.message_type and field.message_type.GetOptions().map_entry:
            # map<string, InferParameter>: compare the entry message it is sugar for.
            _messages(field.message_type, into)
        referenced = field.message_type or field.enum_type
        type_name = referenced.full_name if referenced else ""
        fields[field.name] = [field.number, field.type, field.is_repeated, type_name]
    into[descriptor.full_name] = fields
    for nested in descriptor.nested_types:
        if not nested.GetOptions().map_entry:
            _messages(nested, into)


def _describe() -> dict[str, Any]:
    messages: dict[str, Any] = {}
    for descriptor in pb.DESCRIPTOR.message_types_by_name.values():
        _messages(descriptor, messages)
    enums: dict[str, dict[str, int]] = {}
    for enum in pb.DESCRIPTOR.enum_types_by_name.values():
        assert isinstance(enum, EnumDescriptor)
        enums[enum.full_name] = {value.name: value.number for value in enum.values}
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = {
        m.name: [m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming]
        for m in service.methods
    }
    return {"messages": messages, "enums": enums, "service": service.full_name, "methods": methods}


def test_our_proto_is_wire_compatible_with_tritonclient(tools_python: Path) -> None:
    ours = _describe()
    assert len(ours["methods"]) == 10 and len(ours["messages"]) > 30
    done = subprocess.run(
        [str(tools_python), "-c", COMPARE], input=json.dumps(ours), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []
