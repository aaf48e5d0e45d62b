package model

import (
	"fmt"
	"time"
)

// Ts is a commit timestamp in TiDB's TSO layout: physical milliseconds
// since the Unix epoch shifted left by 18 bits, plus an 18-bit logical
// counter. Comparing two Ts compares their commit order.
type Ts uint64

const logicalBits = 18

// TsFromTime returns the Ts of a wall-clock instant with logical 0.
func TsFromTime(t time.Time) Ts { return TsFromMillis(t.UnixMilli()) }

// TsFromMillis returns the Ts of a physical millisecond with logical 0.
func TsFromMillis(ms int64) Ts { return Ts(uint64(ms) << logicalBits) }

// TsFromMicros is a commit time at microsecond grain: the microseconds
// within the millisecond in the logical bits, above 8 bits left for
// commits that share a microsecond. Database sources give commits these
// positions, so a position is also a time another reader of the
// upstream's clock can compare with.
func TsFromMicros(us int64) Ts { return TsFromMillis(us / 1000).WithLogical(uint64(us%1000) << 8) }

// TsFromTimeMicros is t at the microsecond grain of TsFromMicros. "Every
// commit before t has arrived" is a position past this one: past
// TsFromTime(t), t's millisecond, a commit made earlier in that
// millisecond (a database source's tick) already is, while one made
// later in it (before t) may not have arrived.
func TsFromTimeMicros(t time.Time) Ts { return TsFromMicros(t.UnixMicro()) }

// Millis is the physical part.
func (t Ts) Millis() int64 { return int64(uint64(t) >> logicalBits) }

// Logical is the logical counter.
func (t Ts) Logical() uint64 { return uint64(t) & (1<<logicalBits - 1) }

// Time is the physical part as a time.
func (t Ts) Time() time.Time { return time.UnixMilli(t.Millis()).UTC() }

// WithLogical returns the same millisecond with another logical counter.
func (t Ts) WithLogical(l uint64) Ts {
	return Ts(uint64(t)&^(1<<logicalBits-1) | l&(1<<logicalBits-1))
}

func (t Ts) String() string {
	if t == 0 {
		return "0"
	}
	return fmt.Sprintf("%d(%s+%d)", uint64(t), t.Time().Format("15:04:05.000"), t.Logical())
}
