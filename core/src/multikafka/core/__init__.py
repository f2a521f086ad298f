"""The bottom layer of multikafka: what every other layer shares.

The domain model (``model``), stream-document validation (``validation``),
offset vectors (``offsets``), errors (``exceptions``) and their gRPC codes
(``grpc_codes``), redacting properties (``_secrets``), environment variables
(``env``), the Arrow schema of a read and decoding into it (``arrow``),
decoding keys and values (``decoders``, ``payloads``, ``spark_ddl``), the
pub-sub provider interfaces and their Kafka implementation (``providers``),
the generated gRPC stubs (``v1``), one gRPC transport (``transport``) with the
typed clients built on it (``admin_client``, ``planner_client``), one retry
helper (``retry``) and one way to run background work (``background``).

Nothing here imports from a higher layer (``coordinator``, ``reader_agent``,
``spark_bridge``, ``multikafka``); ``make test`` checks it. The public API is
re-exported by the top package, :mod:`multikafka`.
"""
