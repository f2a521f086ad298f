"""The core of multikafka (the multikafka-core distribution): what every
other part shares, and nothing any one of them alone needs.

The domain model (``model``), stream-document validation (``validation``),
offset vectors (``offsets``) and split ranges (``ranges``) in their wire
forms, starting positions as users write them (``positions``), when a
micro-batch may start (``admission``), errors (``exceptions``) and their gRPC
codes (``grpc_codes``), redacting properties (``_secrets``), environment
variables (``env``), librdkafka settings and log lines (``kafka_config``,
``kafka_log``), one gRPC transport (``transport``) with the typed clients
built on it (``admin_client``, ``planner_client``), one retry helper
(``retry``), one way to run background work (``background``) and the CLIs'
logging (``logs``). The generated gRPC stubs are :mod:`multikafka.v1`.

It needs grpcio, protobuf and numpy only: no Kafka client, Arrow, etcd
client or Spark (``make test`` checks it, and that nothing here imports
from a higher layer). The public names are re-exported by :mod:`multikafka`.
"""
