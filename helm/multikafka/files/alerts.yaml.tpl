{{- /*
The alerting rules of the coordinator, as a Prometheus rules file (groups:
...). The one source of them: templates/prometheusrule.yaml renders this with
`tpl` as the PrometheusRule's spec, thresholds and durations from
.Values.prometheusRule.alerts; without the Prometheus Operator, render the
same and take .spec as a plain rules file (docs/operations.md, "Alerts").
tests/deploy/test_observability.py runs `promtool check rules` on it.

Each runbook_url points at the heading of the alert in docs/operations.md.
*/}}
{{- $p := .Values.prometheusRule }}
{{- $a := $p.alerts }}
{{- $s := $p.selector | default (printf "job=%q, namespace=%q" (include "multikafka.fullname" .) .Release.Namespace) }}
{{- /* multikafka_foo{{ $sel }}: the release's series; multikafka_foo{{ $with }}state="x"}: and more matchers. */}}
{{- $sel := printf "{%s}" $s }}
{{- $with := printf "{%s, " $s }}
{{- /* Per-cluster gauges are set by the leader; a replica that stopped leading
keeps its last values. So they are read from the replica that leads now. */}}
{{- $onLeader := printf "and on (instance) (multikafka_leader%s == 1)" $sel }}
{{- /* Labelled counters appear at their first increment, which increase()
cannot see: a series that is new in the window counts with its value. */}}
{{- $increased := "increase(%[1]s[%[2]s]) > 0 or (%[1]s unless %[1]s offset %[2]s)" }}
{{- $runbook := printf "%s#" $p.runbookURL }}
{{- /* Prometheus' own templates in annotations, kept away from Helm's. */}}
{{- $stream := "{{ $labels.stream }}" }}
{{- $cluster := "{{ $labels.cluster }}" }}
{{- $instance := "{{ $labels.instance }}" }}
{{- $value := "{{ $value | humanize }}" }}
{{- $partition := "{{ $labels.topic }}/{{ $labels.partition }}" }}
groups:
  - name: multikafka
    rules:
{{- with $a.clusterUnreachable }}{{ if .enabled }}
      - alert: MultikafkaClusterUnreachable
        expr: |-
          (
            max by (namespace, job, stream, cluster) (multikafka_cluster_reachable{{ $sel }} {{ $onLeader }}) == 0
          )
          and on (namespace, job, stream, cluster)
          (
            max by (namespace, job, stream, cluster) (multikafka_cluster_state{{ $with }}state=~"ACTIVE|DRAINING"} {{ $onLeader }}) == 1
          )
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Kafka cluster {{ $cluster }} of stream {{ $stream }} is unreachable"
          description: >-
            The coordinator has not reached cluster {{ $cluster }} (ACTIVE or DRAINING)
            of stream {{ $stream }} for {{ .for }}. Its partitions get no new ranges;
            ranges already planned on it wait for it.
          runbook_url: "{{ $runbook }}multikafkaclusterunreachable"
{{- end }}{{ end }}
{{- with $a.lagGrowing }}{{ if .enabled }}
      - alert: MultikafkaLagGrowing
        expr: |-
          (
            max by (namespace, job, stream, cluster) (multikafka_lag_records{{ $sel }} {{ $onLeader }}) > {{ .threshold | int64 }}
          )
          and on (namespace, job, stream, cluster)
          (
            max by (namespace, job, stream, cluster) (deriv(multikafka_lag_records{{ $sel }}[{{ .window }}]) {{ $onLeader }}) > 0
          )
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Lag of stream {{ $stream }} on cluster {{ $cluster }} keeps growing"
          description: >-
            {{ $value }} records of cluster {{ $cluster }} are not read yet by stream
            {{ $stream }} (more than {{ .threshold | int64 }}), and the lag has grown
            for {{ .for }}: queries read it slower than it is written.
          runbook_url: "{{ $runbook }}multikafkalaggrowing"
{{- end }}{{ end }}
{{- with $a.failover }}{{ if .enabled }}
      - alert: MultikafkaFailover
        expr: |-
          sum by (namespace, job, stream, from_cluster, to_cluster, mode) (
            {{ printf $increased (printf "multikafka_failovers_total%s" $sel) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Stream {{ $stream }} failed over from {{ "{{ $labels.from_cluster }}" }} to {{ "{{ $labels.to_cluster }}" }}"
          description: >-
            Stream {{ $stream }} failed over ({{ "{{ $labels.mode }}" }}) from cluster
            {{ "{{ $labels.from_cluster }}" }}, now FAILED, to {{ "{{ $labels.to_cluster }}" }}
            in the last {{ .window }}. Ranges planned on the failed cluster were
            abandoned; reads go on from translated offsets.
          runbook_url: "{{ $runbook }}multikafkafailover"
{{- end }}{{ end }}
{{- with $a.failoverReadTwice }}{{ if .enabled }}
      - alert: MultikafkaFailoverReadTwice
        expr: |-
          sum by (namespace, job, stream, cluster, result) (
            {{ printf $increased (printf "multikafka_failover_translations_total%sresult=~\"estimate|partial\"}" $with) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "A failover of stream {{ $stream }} into {{ $cluster }} read records twice"
          description: >-
            In the last {{ .window }}, splits of cluster {{ $cluster }} of stream {{ $stream }}
            started at the failover's estimate ({{ "{{ $labels.result }}" }}), not right after the
            mirror's copy of the last record read: the records between were read twice. The
            stream's history says why, per split.
          runbook_url: "{{ $runbook }}multikafkafailoverreadtwice"
{{- end }}{{ end }}
{{- with $a.drainNotCompleted }}{{ if .enabled }}
      - alert: MultikafkaDrainNotCompleted
        expr: |-
          max by (namespace, job, stream, cluster) (multikafka_cluster_state{{ $with }}state="DRAINING"} {{ $onLeader }}) == 1
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Cluster {{ $cluster }} of stream {{ $stream }} is DRAINING for more than {{ .for }}"
          description: >-
            Cluster {{ $cluster }} of stream {{ $stream }} has been DRAINING for {{ .for }}:
            either a running query still holds its splits, or the drain completed and the
            cluster was not removed from the stream document.
          runbook_url: "{{ $runbook }}multikafkadrainnotcompleted"
{{- end }}{{ end }}
{{- with $a.noLeader }}{{ if .enabled }}
      - alert: MultikafkaNoLeader
        expr: |-
          sum by (namespace, job) (multikafka_leader{{ $sel }}) < 1
          or
          absent(multikafka_leader{{ $sel }})
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "No multikafka coordinator replica leads"
          description: >-
            For {{ .for }} no coordinator replica of {{ "{{ $labels.namespace }}/{{ $labels.job }}" }}
            has been the leader (or none is scraped): nothing plans new batches, runs
            failovers or drains, or pushes metadata changes to reader agents.
          runbook_url: "{{ $runbook }}multikafkanoleader"
{{- end }}{{ end }}
{{- with $a.leaderFlapping }}{{ if .enabled }}
      - alert: MultikafkaLeaderFlapping
        expr: |-
          sum by (namespace, job) (
            {{ printf $increased (printf "multikafka_elections_total%s" $sel) .window }}
          ) > {{ .threshold | int64 }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "The multikafka coordinator's leadership moved {{ $value }} times in {{ .window }}"
          description: >-
            {{ $value }} leader elections in {{ .window }} (more than {{ .threshold | int64 }}):
            leadership keeps moving between replicas. Each move is a pause for every
            query and agent.
          runbook_url: "{{ $runbook }}multikafkaleaderflapping"
{{- end }}{{ end }}
{{- with $a.leaseRenewalsFailing }}{{ if .enabled }}
      - alert: MultikafkaLeaseRenewalsFailing
        expr: |-
          sum by (namespace, job, instance) (
            {{ printf $increased (printf "multikafka_lease_renewals_failed_total%s" $sel) .window }}
          ) > {{ .threshold | int64 }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Leader lease renewals fail on {{ $instance }}"
          description: >-
            {{ $value }} renewals of the leader's etcd lease failed on {{ $instance }}
            in {{ .window }} (more than {{ .threshold | int64 }}): etcd is slow or hard to
            reach, and the leader is about to lose (or lost) its leadership.
          runbook_url: "{{ $runbook }}multikafkaleaserenewalsfailing"
{{- end }}{{ end }}
{{- with $a.leaseRenewalsSlow }}{{ if .enabled }}
      - alert: MultikafkaLeaseRenewalsSlow
        expr: |-
          histogram_quantile(0.99,
            sum by (namespace, job, instance, le) (rate(multikafka_lease_renewal_seconds_bucket{{ $sel }}[{{ .window }}]))
          ) > {{ .thresholdSeconds }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Leader lease renewals are slow on {{ $instance }}"
          description: >-
            99% of the leader's etcd lease renewals on {{ $instance }} took up to {{ $value }}s
            (more than {{ .thresholdSeconds }}s) for {{ .for }}. A renewal must finish within
            a third of the lease TTL: slower ones lose the leadership.
          runbook_url: "{{ $runbook }}multikafkaleaserenewalsslow"
{{- end }}{{ end }}
{{- with $a.fencedWrites }}{{ if .enabled }}
      - alert: MultikafkaFencedWrites
        expr: |-
          sum by (namespace, job, instance) (
            {{ printf $increased (printf "multikafka_fenced_writes_total%s" $sel) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "A deposed multikafka leader tried to write ({{ $instance }})"
          description: >-
            {{ $value }} writes by {{ $instance }} were refused in {{ .window }} because
            it no longer held the leadership (fencing). Nothing was overwritten; the
            replica had lost its lease without noticing in time.
          runbook_url: "{{ $runbook }}multikafkafencedwrites"
{{- end }}{{ end }}
{{- with $a.metadataRejected }}{{ if .enabled }}
      - alert: MultikafkaMetadataRejected
        expr: |-
          sum by (namespace, job, stream) (
            {{ printf $increased (printf "multikafka_metadata_rejected_total%s" $sel) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "An invalid document of stream {{ $stream }} was ignored"
          description: >-
            In the last {{ .window }} an invalid document of stream {{ $stream }} was
            written to etcd directly and ignored; the last valid one stays in force.
          runbook_url: "{{ $runbook }}multikafkametadatarejected"
{{- end }}{{ end }}
{{- with $a.dataLoss }}{{ if .enabled }}
      - alert: MultikafkaDataLoss
        expr: |-
          sum by (namespace, job, stream, cluster) (
            {{ printf $increased (printf "multikafka_data_loss_events_total%s" $sel) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Records of stream {{ $stream }} on cluster {{ $cluster }} were lost"
          description: >-
            In the last {{ .window }} a query of stream {{ $stream }} (failOnDataLoss=false)
            found a partition on cluster {{ $cluster }} gone (topic deleted) or its offsets
            gone backwards (topic recreated), and skipped the records it could not read.
          runbook_url: "{{ $runbook }}multikafkadataloss"
{{- end }}{{ end }}
{{- with $a.partitionCountShrunk }}{{ if .enabled }}
      - alert: MultikafkaPartitionCountShrunk
        expr: |-
          sum by (namespace, job, stream, cluster) (
            {{ printf $increased (printf "multikafka_partition_count_shrunk_total%s" $sel) .window }}
          ) > 0
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "A topic of stream {{ $stream }} on cluster {{ $cluster }} lost partitions"
          description: >-
            In the last {{ .window }} a topic of stream {{ $stream }} on cluster
            {{ $cluster }} showed fewer partitions than before (a recreated topic?). The
            coordinator keeps the partitions it knew.
          runbook_url: "{{ $runbook }}multikafkapartitioncountshrunk"
{{- end }}{{ end }}
{{- with $a.reconcileSlow }}{{ if .enabled }}
      - alert: MultikafkaReconcileSlow
        expr: |-
          histogram_quantile(0.99,
            sum by (namespace, job, le) (rate(multikafka_reconcile_latency_seconds_bucket{{ $sel }}[{{ .window }}]))
          ) > {{ .thresholdSeconds }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Metadata changes reach reader agents slowly"
          description: >-
            99% of metadata changes took up to {{ $value }}s (more than {{ .thresholdSeconds }}s)
            to be applied by every registered reader agent, for {{ .for }}.
          runbook_url: "{{ $runbook }}multikafkareconcileslow"
{{- end }}{{ end }}
{{- with $a.mirrorSyncsStopped }}{{ if .enabled }}
      - alert: MultikafkaMirrorSyncsStopped
        expr: |-
          (
            max by (namespace, job, stream, cluster, topic, partition) (multikafka_mm2_upstream_lag_records{{ $sel }} {{ $onLeader }}) > {{ .thresholdRecords | int64 }}
          )
          unless on (namespace, job, stream, cluster, topic, partition)
          (
            max by (namespace, job, stream, cluster, topic, partition) (multikafka_mm2_sync_age_seconds{{ $sel }} {{ $onLeader }}) <= {{ .maxAgeSeconds | int64 }}
          )
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "MirrorMaker 2 offset syncs of {{ $partition }} for mirror {{ $cluster }} stopped"
          description: >-
            The source holds {{ $value }} records of {{ $partition }}
            past the newest MirrorMaker 2 offset sync for mirror {{ $cluster }} of stream
            {{ $stream }} (more than {{ .thresholdRecords | int64 }}), and no sync newer than
            {{ .maxAgeSeconds | int64 }}s has been read, for {{ .for }}. An mm2 failover now
            re-reads that many records, or falls back to timestamp.
          runbook_url: "{{ $runbook }}multikafkamirrorsyncsstopped"
{{- end }}{{ end }}
{{- with $a.accessDeniedBurst }}{{ if .enabled }}
      - alert: MultikafkaAccessDeniedBurst
        expr: |-
          sum by (namespace, job, service) (increase(multikafka_denied_total{{ $sel }}[{{ .window }}])) > {{ .threshold | int64 }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "Many calls to the multikafka {{ "{{ $labels.service }}" }} service are refused"
          description: >-
            {{ $value }} calls to the {{ "{{ $labels.service }}" }} service were refused by access
            control in {{ .window }} (more than {{ .threshold | int64 }}): a job with a revoked or
            wrong token, a grant missing after a policy change, or someone trying tokens.
          runbook_url: "{{ $runbook }}multikafkaaccessdeniedburst"
{{- end }}{{ end }}
{{- with $a.accessPolicyRefused }}{{ if .enabled }}
      - alert: MultikafkaAccessPolicyRefused
        expr: |-
          min by (namespace, job, instance) (multikafka_access_policy_valid{{ $sel }}) == 0
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $p.alertLabels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "The access policy file on {{ $instance }} is refused"
          description: >-
            {{ $instance }} refused the access policy file in place for {{ .for }}: it keeps
            the last good policy (or, if it never had one, refuses every call). Its log names
            the line and the reason.
          runbook_url: "{{ $runbook }}multikafkaaccesspolicyrefused"
{{- end }}{{ end }}
