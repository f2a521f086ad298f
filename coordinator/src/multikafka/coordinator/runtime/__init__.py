"""The coordinator process: one replica (:mod:`.server`), the leader
election and its fencing (:mod:`.election`), what the leader runs for a term
(:mod:`.leader`) and the HTTP probes (:mod:`.probes`)."""
