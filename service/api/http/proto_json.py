"""Protocol messages as the JSON the V2 REST protocol shows (metadata, config, statistics).

Like Triton's REST replies: field names as in the proto, 64-bit integers as JSON numbers
(protobuf's own JSON mapping writes them as strings, which clients reading `shape` or
`count` as integers refuse), enums by name, and scalar fields present even at their
default (a statistics reader expects `count: 0`, not a missing key).
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


def to_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    present = {field.name for field, _ in message.ListFields()}
    for field in message.DESCRIPTOR.fields:
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        repeated = _repeated(field)
        # Unset singular messages and unset oneof members stay out, as in Triton's replies.
        if field.name not in present and ((is_message and not repeated) or field.containing_oneof):
            continue
        out[field.name] = _field(field, getattr(message, field.name))
    return out


def _repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def _field(field: Any, value: Any) -> Any:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        value_field = entry.fields_by_name["value"]
        return {str(key): _single(value_field, item) for key, item in value.items()}
    if _repeated(field):
        return [_single(field, item) for item in value]
    return _single(field, value)


def _single(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value
