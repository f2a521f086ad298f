"""Reader agents: their registry (:mod:`.registry`) and the reconcile events
pushed to them (:mod:`.reconcile`)."""
