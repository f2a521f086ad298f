"""Planning micro-batches: the Planner's use cases (:mod:`.batches`) over
where positions resolve (:mod:`.resolve`), offsets asked of the clusters
(:mod:`.lookups`), where new splits enter (:mod:`.entry`), the end vector of
a batch (:mod:`.planner`), per-cluster stops (:mod:`.stopping`), Spark
tasks from split ranges (:mod:`.assignment`), and what a plan leaves in
metrics and history (:mod:`.notes`)."""
