"""The core of multikafka (the multikafka-core distribution): what every
other part shares, and nothing any one of them alone needs.

Public (docs/architecture.md, "Public API"): the domain model
(``model``), stream-document validation (``validation``), errors
(``exceptions``), the environment variables (``env``), one gRPC transport
(``transport``) with the typed clients built on it (``admin_client``,
``planner_client``), MirrorMaker 2's names and records (``mm2``,
``mm2_records``), one polling and retry helper (``retry``), librdkafka's log
lines (``kafka_log``) and the CLIs' logging (``logs``). Internal (``_x``):
offset vectors and split ranges in their wire forms, starting positions,
admission, fingerprints, gRPC codes, librdkafka settings, secret references
and redaction, the unary-over-stream exchange, background work. The
generated gRPC stubs are :mod:`multikafka.v1`.

It needs grpcio, protobuf and numpy only: no Kafka client, Arrow, etcd
client or Spark (``make test`` checks it, and that nothing here imports
from a higher layer). The public names are re-exported by :mod:`multikafka`.
"""
