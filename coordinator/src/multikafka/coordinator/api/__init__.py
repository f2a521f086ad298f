"""The coordinator's gRPC API: the Admin, Planner and Reader services
(``multikafka.v1``), who may call them (:mod:`.auth`) and how errors and
request bytes meet gRPC (:mod:`.rpc`). A method checks its request, makes one
call of a use case of the layers below and turns the answer into a
response; nothing here imports the runtime that wires it."""
