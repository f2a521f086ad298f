"""What the coordinator keeps in etcd: the client and its fencing
(:mod:`.etcd`), stream metadata and status (:mod:`.metadata`,
:mod:`.stream_status`), query progress (:mod:`.queries`) and stream history
(:mod:`.history`)."""
