"""What operators do and see (the Admin service's use cases): stream
documents and cluster operations on the leader (:mod:`.streams`), reports
on streams, history, readers and queries from any replica
(:mod:`.reports`), and a replica's own status (:mod:`.status`)."""
