package agent

import (
	"encoding/json"
	"runtime"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/version"
)

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// metrics are the node's own series. They live in a registry the node owns,
// so two nodes in one test process never share a global.
type metrics struct {
	reg *prometheus.Registry
	// etcd: the etcd client's requests, by gRPC service, method and code
	// (a slow or failing etcd shows here before it shows as lag).
	etcd             *grpcprom.ClientMetrics
	isCoordinator    prometheus.Gauge
	coordinatorEpoch prometheus.Gauge
	termsWon         prometheus.Counter
	liveness         *prometheus.GaugeVec
	nodes            prometheus.Gauge
	cleanupsPending  prometheus.Gauge
	slotRetained     *prometheus.GaugeVec
	headroom         *prometheus.GaugeVec
	incarnations     prometheus.Counter
	checkpointLag    *prometheus.GaugeVec
	changefeedState  *prometheus.GaugeVec
	tableIssues      *prometheus.GaugeVec
	checkpointTs     *prometheus.GaugeVec
	dispatchers      *prometheus.GaugeVec
	eventLogDisk     *prometheus.GaugeVec
	// Seed 000's drain metrics.
	drainStatus      *prometheus.GaugeVec
	drainMaintainers *prometheus.GaugeVec
	drainDispatchers *prometheus.GaugeVec
	drainDuration    *prometheus.HistogramVec
	// The data path, labelled by changefeed and sink scheme only.
	sinkEvents   *prometheus.CounterVec
	sinkBytes    *prometheus.CounterVec
	sinkErrors   *prometheus.CounterVec
	sinkFlushDur *prometheus.HistogramVec
	// Seed 002's dispatcher recovery, without per-dispatcher labels.
	recoveries       prometheus.Counter
	recoverPending   prometheus.Gauge
	recoverResponses *prometheus.CounterVec
	restarts         *prometheus.CounterVec
	// Seed 004's storage sink series.
	storage *storageMetrics
	kafka   *kafkaMetrics
	plans   *planMetrics
	http    *httpMetrics
	// transport: only with the gRPC transport (not the tests' hub).
	transport *transportMetrics
	// fullReads counts API reads that could not wait for the view.
	fullReads prometheus.Counter
}

// recoveryMetrics is the dispatcher manager's view of the node's metrics.
type recoveryMetrics struct{ m *metrics }

func (r recoveryMetrics) Recovered()    { r.m.recoveries.Inc() }
func (r recoveryMetrics) Pending(n int) { r.m.recoverPending.Set(float64(n)) }
func (r recoveryMetrics) Answered(s transport.RecoverState) {
	r.m.recoverResponses.WithLabelValues(string(s)).Inc()
}
func (r recoveryMetrics) Restarted(reason string) { r.m.restarts.WithLabelValues(reason).Inc() }

func (m *metrics) newRecoveryMetrics() {
	m.recoveries = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "dispatcher", Name: "recoveries_total",
		Help: "Dispatchers recovered on this node (re-created after their sink failed, and running healthy again).",
	})
	m.recoverPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "dispatcher", Name: "recover_pending",
		Help: "Dispatcher recoveries in progress on this node.",
	})
	m.recoverResponses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "dispatcher", Name: "recover_responses_total",
		Help: "Maintainers' answers to this node's recovery requests, by state (ACCEPTED, RUNNING, SUPERSEDED, FAILED).",
	}, []string{"state"})
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "changefeed", Name: "restarts_total",
		Help: "Changefeed restarts on this node, by reason (recover_timeout: a recovery did not finish in time; recover_failed: the maintainer could not recover a dispatcher).",
	}, []string{"reason"})
	for _, s := range []transport.RecoverState{transport.RecoverAccepted, transport.RecoverRunning, transport.RecoverSuperseded, transport.RecoverFailed} {
		m.recoverResponses.WithLabelValues(string(s))
	}
	for _, r := range []string{"recover_timeout", "recover_failed"} {
		m.restarts.WithLabelValues(r)
	}
	m.reg.MustRegister(m.recoveries, m.recoverPending, m.recoverResponses, m.restarts)
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Which build answers: dashboards join on it to tell a rolling
	// upgrade's old and new agents apart.
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Name: "build_info",
		Help: "Always 1; its labels are the agent's version, source revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(version.Version, orUnknown(version.Commit), runtime.Version()).Set(1)
	reg.MustRegister(buildInfo)
	etcd := grpcprom.NewClientMetrics(
		grpcprom.WithClientCounterOptions(grpcprom.WithNamespace("cdcctl"), grpcprom.WithSubsystem("etcd")),
		grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramNamespace("cdcctl"), grpcprom.WithHistogramSubsystem("etcd"),
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2, 16))),
	)
	reg.MustRegister(etcd)
	m := &metrics{
		reg:  reg,
		etcd: etcd,
		isCoordinator: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "election", Name: "is_coordinator",
			Help: "1 while this node holds the coordinator term.",
		}),
		coordinatorEpoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "election", Name: "coordinator_epoch",
			Help: "Epoch of the current coordinator term as this node sees it.",
		}),
		termsWon: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "election", Name: "terms_won_total",
			Help: "Coordinator terms this node has won.",
		}),
		liveness: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "cluster", Name: "node_liveness",
			Help: "1 for the liveness each registered node is in, as this node sees it.",
		}, []string{"node", "liveness"}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "cluster", Name: "nodes",
			Help: "Registered nodes as this node sees them.",
		}),
		cleanupsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "source", Name: "cleanups_pending",
			Help: "Removed changefeeds whose replication slot the coordinator has not dropped yet (the database was unreachable); each holds WAL upstream.",
		}),
		slotRetained: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "source", Name: "retained_bytes",
			Help: "WAL the replication slot of a database changefeed retains upstream (PostgreSQL), in bytes; read every 30 s by the capture maintaining it.",
		}, []string{"changefeed"}),
		headroom: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "source", Name: "retention_headroom_seconds",
			Help: "How long a database changefeed may fall further behind before the upstream purges its position (MySQL: binary log expiry minus the checkpoint lag); negative once it is behind that. Only for upstreams that purge by age; read every 30 s by the capture maintaining it.",
		}, []string{"changefeed"}),
		incarnations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "cluster", Name: "joins_total",
			Help: "Times this process joined the cluster (more than 1 means its session was lost and renewed).",
		}),
	}
	m.checkpointLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "changefeed", Name: "checkpoint_lag_seconds",
		Help: "How far each changefeed's checkpoint is behind now (as this node sees etcd).",
	}, []string{"changefeed"})
	m.changefeedState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "changefeed", Name: "state",
		Help: "1 for the state each changefeed is in (normal, warning, paused, failed), as this node sees etcd; warning: normal but not advancing, its error says why.",
	}, []string{"changefeed", "state"})
	m.tableIssues = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "changefeed", Name: "tables",
		Help: "Tables of each changefeed that do not replicate as they should, by state: held (its partitions stop while the other tables advance) or dropped (upstream); 'cdcctl changefeed get' says why and what to do.",
	}, []string{"changefeed", "state"})
	m.checkpointTs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "changefeed", Name: "checkpoint_ts",
		Help: "Each changefeed's checkpoint as Unix milliseconds (TiCDC's convention: a float64 cannot hold the TSO itself exactly).",
	}, []string{"changefeed"})
	m.eventLogDisk = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "eventlog", Name: "bytes",
		Help: "Space each database changefeed's event log takes on this node (where its reader runs): its files on disk, its memtables and its newest rows kept in memory (--log-memory-mib). It is trimmed to the changefeed's checkpoint: growing without end means a partition that does not advance holds it (changefeed get).",
	}, []string{"changefeed"})
	m.dispatchers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "dispatcher", Name: "running",
		Help: "Dispatchers running on this node, per changefeed.",
	}, []string{"changefeed"})
	m.drainStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "coordinator", Name: "drain_capture_status",
		Help: "Status of drain capture operation (0=idle, 1=draining).",
	}, []string{"capture_id"})
	m.drainMaintainers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "coordinator", Name: "drain_capture_remaining_maintainers",
		Help: "Number of remaining maintainers on draining capture.",
	}, []string{"capture_id"})
	m.drainDispatchers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cdcctl", Subsystem: "coordinator", Name: "drain_capture_remaining_dispatchers",
		Help: "Number of remaining dispatchers on draining capture.",
	}, []string{"capture_id"})
	m.drainDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cdcctl", Subsystem: "coordinator", Name: "drain_capture_duration_seconds",
		Help:    "Duration of drain capture operation.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	}, []string{"capture_id"})
	m.sinkEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "sink", Name: "events_total",
		Help: "Row changes this node made durable in the sink (rate() gives events/s).",
	}, []string{"changefeed", "sink"})
	m.sinkBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "sink", Name: "row_bytes_total",
		Help: "Row payload bytes (keys and column values, before encoding) this node made durable in the sink.",
	}, []string{"changefeed", "sink"})
	m.sinkErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "sink", Name: "flush_errors_total",
		Help: "Batches the sink failed to make durable (their dispatchers restart from their checkpoints).",
	}, []string{"changefeed", "sink"})
	m.sinkFlushDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cdcctl", Subsystem: "sink", Name: "flush_duration_seconds",
		Help:    "Time from a batch's write to its flush ack (durable).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"sink"})
	reg.MustRegister(m.sinkEvents, m.sinkBytes, m.sinkErrors, m.sinkFlushDur)
	reg.MustRegister(m.isCoordinator, m.coordinatorEpoch, m.termsWon, m.liveness, m.nodes, m.cleanupsPending, m.slotRetained, m.headroom, m.incarnations,
		m.checkpointLag, m.changefeedState, m.tableIssues, m.checkpointTs, m.dispatchers, m.eventLogDisk, m.drainStatus, m.drainMaintainers, m.drainDispatchers, m.drainDuration)
	m.newRecoveryMetrics()
	m.storage = newStorageMetrics(m.reg)
	m.kafka = newKafkaMetrics(m.reg)
	m.plans = newPlanMetrics(m.reg)
	m.http = newHTTPMetrics(m.reg)
	m.transport = newTransportMetrics(m.reg)
	m.fullReads = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "cdcctl", Subsystem: "api", Name: "full_reads_total",
		Help: "API reads served by reading the whole cluster state from etcd because this capture's watched view did not catch up in time (normally 0).",
	})
	m.reg.MustRegister(m.fullReads)
	return m
}

// sinkObserver feeds one changefeed's sink activity into the metrics.
type sinkObserver struct {
	events, bytes, errors prometheus.Counter
	flush                 prometheus.Observer
}

func (m *metrics) observeSink(cf model.ChangefeedID, scheme string) sink.Observer {
	return &sinkObserver{
		events: m.sinkEvents.WithLabelValues(string(cf), scheme),
		bytes:  m.sinkBytes.WithLabelValues(string(cf), scheme),
		errors: m.sinkErrors.WithLabelValues(string(cf), scheme),
		flush:  m.sinkFlushDur.WithLabelValues(scheme),
	}
}

func (o *sinkObserver) Flushed(events, bytes int, d time.Duration, err error) {
	if err != nil {
		o.errors.Inc()
		return
	}
	o.events.Add(float64(events))
	o.bytes.Add(float64(bytes))
	o.flush.Observe(d.Seconds())
}

// drainMetrics keeps seed 000's drain metrics in step with the drain
// record. The duration is observed from the drain plans that ended (each
// once per node), not from seeing the record go: a drain shorter than
// this loop's pace would be missed.
func (n *Node) drainMetrics(st *meta.State, last *model.DrainRecord) *model.DrainRecord {
	n.observeFinishedDrains(st)
	if st.Drain != nil {
		target := string(st.Drain.Target)
		maint, disp := coordinator.DrainProgress(st, st.Drain.Target)
		total := 0
		for _, c := range disp {
			total += c
		}
		n.metrics.drainStatus.WithLabelValues(target).Set(1)
		n.metrics.drainMaintainers.WithLabelValues(target).Set(float64(maint))
		n.metrics.drainDispatchers.WithLabelValues(target).Set(float64(total))
		return st.Drain
	}
	if last != nil {
		target := string(last.Target)
		n.metrics.drainStatus.WithLabelValues(target).Set(0)
		n.metrics.drainMaintainers.WithLabelValues(target).Set(0)
		n.metrics.drainDispatchers.WithLabelValues(target).Set(0)
	}
	return nil
}

// drainPlan is the part of a plan record the drain metrics read.
type drainPlan struct {
	Plan struct {
		Kind   plan.Kind `json:"kind"`
		Target string    `json:"target"`
	} `json:"plan"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// observeFinishedDrains observes the duration of every drain plan that
// ended since this node started, once, and shows its target not draining.
func (n *Node) observeFinishedDrains(st *meta.State) {
	for id := range n.drainsSeen {
		if _, ok := st.Plans[id]; !ok {
			delete(n.drainsSeen, id) // pruned from etcd: never seen again
		}
	}
	for id, raw := range st.Plans {
		if n.drainsSeen[id] {
			continue
		}
		var p drainPlan
		if json.Unmarshal(raw.Value, &p) != nil || p.Plan.Kind != plan.KindDrain {
			n.drainsSeen[id] = true // a plan's kind never changes: not read again
			continue
		}
		if p.FinishedAt == nil {
			continue
		}
		n.drainsSeen[id] = true
		if p.FinishedAt.Before(n.started) {
			continue // ended before this node was here to see it
		}
		if st.Drain == nil || string(st.Drain.Target) != p.Plan.Target {
			n.metrics.drainStatus.WithLabelValues(p.Plan.Target).Set(0)
		}
		n.metrics.drainDuration.WithLabelValues(p.Plan.Target).Observe(p.FinishedAt.Sub(p.SubmittedAt).Seconds())
	}
}

// b2f is 1 for true: a gauge of the state something is in.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gaugeSet keeps a gauge vector's series in step with passes over the
// cluster's state: the series set in a pass stay, those of the pass
// before that were not set again are deleted. A Reset before each pass
// would let a scrape in between see every series gone.
type gaugeSet struct {
	vec       *prometheus.GaugeVec
	last, now map[string][]string // label values, by their joined form
}

// set sets a series in this pass.
func (g *gaugeSet) set(v float64, labels ...string) {
	if g.now == nil {
		g.now = map[string][]string{}
	}
	g.now[strings.Join(labels, "\x00")] = labels
	g.vec.WithLabelValues(labels...).Set(v)
}

// done ends a pass: the series it did not set are deleted.
func (g *gaugeSet) done() {
	for k, labels := range g.last {
		if _, ok := g.now[k]; !ok {
			g.vec.DeleteLabelValues(labels...)
		}
	}
	g.last, g.now = g.now, nil
}
