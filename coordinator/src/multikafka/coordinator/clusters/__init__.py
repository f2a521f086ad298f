"""The Kafka clusters of every stream: their metadata client (:mod:`.kafka`),
partition discovery and reachability (:mod:`.discovery`), and their
lifecycle: drain, fail, activate, failover (:mod:`.lifecycle`)."""
