package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
)

// storageMetrics are seed 004's storage sink series, summed over every
// storage sink on this node, with no table, dispatcher or changefeed
// label (a million tables must not make a million series).
type storageMetrics struct {
	flushTasks   *prometheus.CounterVec
	writeDur     map[string]prometheus.Histogram
	backlog      *prometheus.GaugeVec
	activeTables prometheus.Gauge
	spoolDisk    prometheus.Gauge
	retries      prometheus.Counter
}

func newStorageMetrics(reg *prometheus.Registry) *storageMetrics {
	sm := &storageMetrics{
		flushTasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: "flush_tasks_total",
			Help: "Storage sink flushes (one dispatcher's buffered rows written as files) by what made them due: size (file-size reached), interval (flush-interval), delay (max-flush-delay), fanout (more partitions waiting than max-active-tables), bytes_cap (more bytes waiting than max-buffered-bytes, or the spool was full), ddl (the rows before a DDL, by the DDL barrier), forced (a hand-over, a stop, a failed dispatcher settling).",
		}, []string{"reason"}),
		writeDur: map[string]prometheus.Histogram{},
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: "backlog_bytes",
			Help: "Encoded bytes held by the storage sinks: spooled (waiting for their flush) and flushing (being written).",
		}, []string{"stage"}),
		activeTables: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: "active_tables",
			Help: "Table partitions with rows buffered or being written by the storage sinks.",
		}),
		spoolDisk: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: "spool_disk_bytes",
			Help: "Size of the storage sinks' disk spool files (spool=disk): rows waiting for their flush, plus flushed rows a segment file keeps until its last row is flushed.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: "write_retries_total",
			Help: "Uploads of the storage sinks tried again because the bucket refused them (full, throttling, failing); past the sink's retry-timeout the flush fails and its partition resumes from its checkpoint.",
		}),
	}
	for _, r := range registry.StorageFlushReasons() {
		sm.flushTasks.WithLabelValues(r)
	}
	for _, stage := range []string{"spooled", "flushing"} {
		sm.backlog.WithLabelValues(stage)
	}
	reg.MustRegister(sm.flushTasks, sm.backlog, sm.activeTables, sm.spoolDisk, sm.retries)
	for _, object := range []string{"data", "index", "schema"} {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cdcctl", Subsystem: "storage", Name: object + "_write_duration_seconds",
			Help:    "Time to write one " + object + " object of the storage sink (for schema: its check and write).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		})
		sm.writeDur[object] = h
		reg.MustRegister(h)
	}
	return sm
}

func (sm *storageMetrics) FlushTask(reason string) { sm.flushTasks.WithLabelValues(reason).Inc() }

func (sm *storageMetrics) WriteDuration(object string, d time.Duration) {
	if h := sm.writeDur[object]; h != nil {
		h.Observe(d.Seconds())
	}
}

func (sm *storageMetrics) Backlog(spooled, flushing int64) {
	if spooled != 0 {
		sm.backlog.WithLabelValues("spooled").Add(float64(spooled))
	}
	if flushing != 0 {
		sm.backlog.WithLabelValues("flushing").Add(float64(flushing))
	}
}

func (sm *storageMetrics) ActiveTables(delta int) { sm.activeTables.Add(float64(delta)) }

func (sm *storageMetrics) SpoolDisk(delta int64) { sm.spoolDisk.Add(float64(delta)) }

func (sm *storageMetrics) Retry() { sm.retries.Inc() }

var _ registry.StorageMetrics = (*storageMetrics)(nil)
