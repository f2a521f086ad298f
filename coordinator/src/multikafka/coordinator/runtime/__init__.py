"""The coordinator process: one replica (:mod:`.server`), its gRPC server
(:mod:`.services`), its announcement in etcd (:mod:`.presence`), the leader
election and its fencing (:mod:`.election`), what the leader runs for a term
and the use cases of the term (:mod:`.leader`) and the HTTP probes
(:mod:`.probes`)."""
