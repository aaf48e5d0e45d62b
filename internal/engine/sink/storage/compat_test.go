package storage_test

// A consumer's view of the storage sink's files, decoded without the
// project's codec (package compat, written from the published format
// documents), with the layout and schema file as TiCDC documents them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/compat"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// schemaFileDoc is TiCDC's table schema file.
type schemaFileDoc struct {
	Table        string `json:"Table"`
	Schema       string `json:"Schema"`
	Version      int    `json:"Version"`
	TableVersion uint64 `json:"TableVersion"`
	TableColumns []struct {
		ColumnName string `json:"ColumnName"`
		ColumnType string `json:"ColumnType"`
		ColumnIsPk string `json:"ColumnIsPk"`
	} `json:"TableColumns"`
	TableColumnsTotal int `json:"TableColumnsTotal"`
}

// The layout: <schema>/<table>/<version>/CDC_<...>_<index>.<ext>, its
// index file in <version>/meta, schema files in <table>/meta.
var (
	compatData   = regexp.MustCompile(`^([^/]+)/([^/]+)/(\d+)/CDC_[^/]+_(\d{6,})\.(json|csv)$`)
	compatIndex  = regexp.MustCompile(`^([^/]+)/([^/]+)/(\d+)/meta/CDC_[^/]+\.index$`)
	compatSchema = regexp.MustCompile(`^([^/]+)/([^/]+)/meta/schema_(\d+)_(\d{10})\.json$`)
)

func TestAConsumerWrittenFromTheFormatDocsReadsTheSink(t *testing.T) {
	for _, protocol := range []string{"canal-json", "csv"} {
		t.Run(protocol, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, "file://"+dir+"?protocol="+protocol+"&file-size=4096&flush-interval=50ms")
			g := newGen(t, gen.Config{Tables: 3, Keys: 40, Rate: 600, Seed: 9})
			upTo := model.TsFromMillis(start + 3000)
			var a acks
			total := 0
			for _, table := range g.TableNames() {
				total += feedFlushing(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a, 4)
				if err := s.Flush(context.Background(), table+"-p1.1"); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.WriteCheckpoint(context.Background(), upTo); err != nil {
				t.Fatal(err)
			}

			schemas := map[string]schemaFileDoc{} // by <schema>/<table>/<version>
			var dataFiles, indexFiles []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return nil
				}
				rel, _ := filepath.Rel(dir, p)
				rel = filepath.ToSlash(rel)
				switch {
				case rel == "metadata":
					var m struct {
						CheckpointTs *uint64 `json:"checkpoint-ts"`
					}
					body, _ := os.ReadFile(p)
					if json.Unmarshal(body, &m) != nil || m.CheckpointTs == nil || *m.CheckpointTs != uint64(upTo) {
						t.Errorf("metadata is %s; want {\"checkpoint-ts\": %d}", body, upTo)
					}
				case compatSchema.MatchString(rel):
					m := compatSchema.FindStringSubmatch(rel)
					var sch schemaFileDoc
					body, _ := os.ReadFile(p)
					if err := json.Unmarshal(body, &sch); err != nil {
						t.Errorf("schema file %s: %v", rel, err)
						return nil
					}
					if sch.Schema != m[1] || sch.Table != m[2] || strconv.FormatUint(sch.TableVersion, 10) != m[3] || sch.Version != 1 ||
						sch.TableColumnsTotal != len(sch.TableColumns) || sch.TableColumnsTotal == 0 {
						t.Errorf("schema file %s does not describe its table and version: %s", rel, body)
					}
					schemas[m[1]+"/"+m[2]+"/"+m[3]] = sch
				case compatData.MatchString(rel):
					dataFiles = append(dataFiles, rel)
				case compatIndex.MatchString(rel):
					indexFiles = append(indexFiles, rel)
				default:
					t.Errorf("a file the layout does not have: %s", rel)
				}
				return nil
			})
			if len(dataFiles) < 3 || len(indexFiles) != 3 {
				t.Fatalf("%d data files and %d index files", len(dataFiles), len(indexFiles))
			}
			// An index names its directory's newest data file.
			for _, idx := range indexFiles {
				body, _ := os.ReadFile(filepath.Join(dir, idx))
				named := filepath.Join(filepath.Dir(filepath.Dir(idx)), strings.TrimSpace(string(body)))
				if _, err := os.Stat(filepath.Join(dir, named)); err != nil {
					t.Errorf("index %s names %q, which is not there", idx, body)
				}
			}

			rows := 0
			lastTs := map[string]uint64{} // per table and key: commit order
			for _, f := range dataFiles {
				m := compatData.FindStringSubmatch(f)
				sch, ok := schemas[m[1]+"/"+m[2]+"/"+m[3]]
				if !ok {
					t.Fatalf("data file %s has no schema file for its version", f)
				}
				var pk []string
				var cols []string
				for _, c := range sch.TableColumns {
					cols = append(cols, c.ColumnName)
					if c.ColumnIsPk == "true" {
						pk = append(pk, c.ColumnName)
					}
				}
				body, _ := os.ReadFile(filepath.Join(dir, f))
				for _, r := range decodeCompat(t, f, protocol, body, compat.Table{Database: m[1], Name: m[2], Columns: cols, Keys: pk}) {
					k := m[2] + "/" + r.Key
					if r.CommitTs < lastTs[k] {
						t.Errorf("%s: key %s at commit %d after %d", f, r.Key, r.CommitTs, lastTs[k])
					}
					lastTs[k] = r.CommitTs
					rows++
				}
			}
			if rows != total {
				t.Fatalf("a consumer read %d rows; %d were written", rows, total)
			}
		})
	}
}

// decodeCompat decodes one data file as the format documents say a
// consumer should (package compat), checking every field they promise.
func decodeCompat(t *testing.T, file, protocol string, body []byte, want compat.Table) []compat.Row {
	t.Helper()
	var out []compat.Row
	if protocol == "csv" {
		recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatalf("%s: not CSV: %v", file, err)
		}
		for _, rec := range recs {
			r, err := compat.DecodeCSV(rec, want)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			out = append(out, r)
		}
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		r, err := compat.DecodeCanal(sc.Bytes(), want)
		if err != nil {
			t.Fatalf("%s: %v\n%s", file, err, sc.Bytes())
		}
		out = append(out, r)
	}
	return out
}
