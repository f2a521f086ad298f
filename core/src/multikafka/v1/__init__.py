"""Generated gRPC stubs of the multikafka.v1 protocol (see proto/generate.py)."""
