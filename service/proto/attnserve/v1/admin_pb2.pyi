from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReloadRequest(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelChange(_message.Message):
    __slots__ = ("model", "loaded", "refused", "removed", "serving")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    model: str
    loaded: _containers.RepeatedScalarFieldContainer[int]
    refused: _containers.RepeatedScalarFieldContainer[int]
    removed: _containers.RepeatedScalarFieldContainer[int]
    serving: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., loaded: _Optional[_Iterable[int]] = ..., refused: _Optional[_Iterable[int]] = ..., removed: _Optional[_Iterable[int]] = ..., serving: _Optional[_Iterable[int]] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelChange]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelChange, _Mapping]]] = ...) -> None: ...

class UnloadRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class UnloadResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelChange
    def __init__(self, model: _Optional[_Union[ModelChange, _Mapping]] = ...) -> None: ...
