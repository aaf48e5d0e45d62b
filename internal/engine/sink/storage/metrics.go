package storage

import "time"

// Metrics receives what the storage sink does, with no table or
// dispatcher in it (seed 004's low cardinality). Its methods must be
// cheap and must not block. Nil is fine.
type Metrics interface {
	// FlushTask counts one dispatcher's flush by what made it due:
	// size, interval, delay, fanout (max-active-tables), bytes_cap
	// (max-buffered-bytes, or a write waits for spool room), ddl (the
	// DDL barrier's flush of the rows before a DDL) or forced (any other
	// Flush: a hand-over, a stop, a failed dispatcher settling).
	FlushTask(reason string)
	// WriteDuration is how long one object write took: data, index or
	// schema (the schema check and write).
	WriteDuration(object string, d time.Duration)
	// Backlog moves the bytes held: spooled (encoded, waiting for their
	// flush) and flushing (being written).
	Backlog(spooled, flushing int64)
	// ActiveTables moves the number of table partitions with rows
	// buffered or being written.
	ActiveTables(delta int)
	// SpoolDisk moves the size of the disk spools' segment files (with
	// spool=disk): the backlog's spooled bytes, plus the flushed rows a
	// segment keeps until its last row is flushed.
	SpoolDisk(delta int64)
	// Retry counts an upload tried again because the bucket refused it
	// (retry-timeout).
	Retry()
}

// Flush reasons.
const (
	ReasonSize     = "size"
	ReasonInterval = "interval"
	ReasonDelay    = "delay"
	ReasonFanout   = "fanout"
	ReasonBytesCap = "bytes_cap"
	ReasonForced   = "forced"
	ReasonDDL      = "ddl"
)

// Reasons are every flush reason, for a metrics series per reason from
// the start.
var Reasons = []string{ReasonSize, ReasonInterval, ReasonDelay, ReasonFanout, ReasonBytesCap, ReasonForced, ReasonDDL}

type noMetrics struct{}

func (noMetrics) FlushTask(string)                    {}
func (noMetrics) WriteDuration(string, time.Duration) {}
func (noMetrics) Backlog(int64, int64)                {}
func (noMetrics) ActiveTables(int)                    {}
func (noMetrics) SpoolDisk(int64)                     {}
func (noMetrics) Retry()                              {}
