"""Reader agents: their registry (:mod:`.registry`), the reconcile events
pushed to them (:mod:`.reconcile`) and the coordinator's end of their link,
the Reader service's use cases (:mod:`.link`), and the task slots they
report for the planner (:mod:`.task_slots`)."""
