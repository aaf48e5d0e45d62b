package source

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A database source's position holds, beside where its reader resumes,
// every table's columns there (its schema history's state): a changefeed
// of 3,000 tables of ten columns, or of 40 tables of a thousand, makes
// megabytes of JSON, and the position is one etcd value, written at
// every checkpoint (etcd takes at most 1.5 MiB a request by default, its
// clients 2 MiB). Such a changefeed could not even be created: etcd's
// client refused the write with "trying to send message larger than
// max". Past positionPlain bytes a position is kept compressed — the
// columns repeat their words, and deflate takes them to a tenth or less
// — as a JSON string, so that it stays a JSON value (model's
// SourcePosition); smaller ones stay as they were, readable, and
// readable by agents of versions before this (a rolling upgrade's older
// captures may run a changefeed's reader): only a position past what
// they could mostly keep (about 1.4 MiB beside the rest of a status) is
// one they cannot read.
const (
	positionPlain = 1 << 20
	// positionMost bounds a compressed position, under etcd's request
	// limit with room for the rest of the changefeed's status.
	positionMost = 1 << 20
	// warnEvery spaces the errors of a position that cannot be kept.
	warnEvery = time.Minute
	// compressedPosition begins a compressed position's string.
	compressedPosition = "deflate:"
)

// EncodePosition writes a database source's position: v as JSON, or
// compressed (DecodePosition reads both). An error names what is too
// large to keep.
func EncodePosition(v any) (Position, error) {
	b, err := json.Marshal(v)
	if err != nil || len(b) <= positionPlain {
		return b, err
	}
	var buf bytes.Buffer
	buf.WriteString(`"` + compressedPosition)
	enc := base64.NewEncoder(base64.StdEncoding, &buf)
	zw, err := flate.NewWriter(enc, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	buf.WriteByte('"')
	if buf.Len() > positionMost {
		return nil, fmt.Errorf("the changefeed's position (where its reader resumes, with every table's columns there) takes %.1f MiB even compressed (%.1f MiB plain), over the %d MiB it may take in etcd: its tables are too many or too wide for one changefeed; split them over several changefeeds (table rules by database or by name)",
			float64(buf.Len())/(1<<20), float64(len(b))/(1<<20), positionMost>>20)
	}
	return buf.Bytes(), nil
}

// DecodePosition reads a position EncodePosition wrote, or one written
// before positions were compressed, into v.
func DecodePosition(p Position, v any) error {
	if len(p) == 0 || p[0] != '"' {
		return json.Unmarshal(p, v)
	}
	var s string
	if err := json.Unmarshal(p, &s); err != nil {
		return err
	}
	rest, ok := strings.CutPrefix(s, compressedPosition)
	if !ok {
		return fmt.Errorf("a position of an unknown form (%.20q…)", s)
	}
	zr := flate.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(rest)))
	defer zr.Close()
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		return fmt.Errorf("a compressed position: %w", err)
	}
	return nil
}

// PositionCache encodes a reader's resume points for its checkpoints
// (Puller.ResumePoint): the same point asked for again, as the
// checkpoint moves within it, is encoded once (a position of thousands
// of tables takes tens of milliseconds, and checkpoints come every 100
// ms); one that cannot be kept is said at most once a minute.
type PositionCache struct {
	mu     sync.Mutex
	at     model.Ts
	b      Position
	warned time.Time
}

// Encode is EncodePosition of v, the resume point at at; false when it
// cannot be kept (warn is told why, at most once a minute): the
// checkpoint is then saved with the resume point saved before, so the
// upstream keeps its log from there and a restart reads again from
// there.
func (c *PositionCache) Encode(at model.Ts, v any, warn func(error)) (Position, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b != nil && c.at == at {
		return c.b, true
	}
	b, err := EncodePosition(v)
	if err != nil {
		if time.Since(c.warned) >= warnEvery {
			c.warned = time.Now()
			warn(err)
		}
		return nil, false
	}
	c.at, c.b = at, b
	return b, true
}

// Forget drops the encoded point: its reader changed the points it
// keeps in place (or starts again from another).
func (c *PositionCache) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = nil
}
