"""Server reflection lets grpcurl-style tools discover the API without the .proto files."""

from __future__ import annotations

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.support.servers import RunningServer


def test_reflection_lists_and_describes_the_services(server: RunningServer) -> None:
    with grpc.insecure_channel(server.target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {"attnserve.v1.Classifier", "grpc.health.v1.Health"} <= services
        pool = DescriptorPool(database)
        classifier = pool.FindServiceByName("attnserve.v1.Classifier")
        assert set(classifier.methods_by_name) == {"Classify", "ClassifyStream", "ListModels", "GetModel"}
        request = pool.FindMessageTypeByName("attnserve.v1.ClassifyRequest")
        assert {"model", "version", "texts", "attention", "top_k"} <= set(request.fields_by_name)
