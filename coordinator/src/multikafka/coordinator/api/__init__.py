"""The coordinator's gRPC API: the Admin, Planner and Reader services
(``multikafka.v1``), who may call them (:mod:`.auth`) and how errors and
request bytes meet gRPC (:mod:`.rpc`). A method turns its request into a call
of the layers below and the answer into a response."""
