"""Planning micro-batches: where new splits enter (:mod:`.entry`), the end
vector of a batch (:mod:`.planner`), per-cluster stops (:mod:`.stopping`) and
Spark tasks from split ranges (:mod:`.assignment`)."""
