package verify

import (
	"encoding/json"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// misordered counts what a consumer applying one writer's changes of a
// table in the order they were written would meet out of commit order,
// up to upTo: a change of a key written after a newer change of that key
// (its first copy: a replay writes again what was written before), and a
// key whose last change is not its newest (it would end stale). The
// rebuild applies every change by its position, so without this a sink
// that wrote a key's changes swapped rebuilt the same table. A Kafka
// topic's streams end where positions go back (its reader's cut), so
// only a storage sink's writers are judged whole.
func misordered(streams []codec.ChangeStream, table string, upTo model.Ts) (uint64, []string) {
	type change struct {
		ts       model.Ts
		key, img string
	}
	type keyState struct{ newest, last model.Ts }
	var n uint64
	var examples []string
	bad := func(format string, a ...any) {
		n++
		if len(examples) < maxExamples {
			examples = append(examples, fmt.Sprintf(format, a...))
		}
	}
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) != table {
			continue
		}
		keys := map[string]*keyState{}
		seen := map[change]bool{}
		for i := range st.Changes {
			c := &st.Changes[i]
			if c.CommitTs > upTo {
				continue
			}
			k := c.Key()
			img, _ := json.Marshal(c.Data)
			id := change{c.CommitTs, k, c.Op + string(img)}
			ks := keys[k]
			if ks == nil {
				ks = &keyState{}
				keys[k] = ks
			}
			if !seen[id] {
				seen[id] = true
				if c.CommitTs < ks.newest {
					bad("%s: a change of key %q at %s written after one at %s (%s)", table, k, c.CommitTs, ks.newest, st.Dispatcher)
				}
			}
			ks.newest, ks.last = max(ks.newest, c.CommitTs), c.CommitTs
		}
		for k, ks := range keys {
			if ks.last < ks.newest {
				bad("%s: key %q's last change is at %s, after one at %s (%s): read in order, it ends stale", table, k, ks.last, ks.newest, st.Dispatcher)
			}
		}
	}
	return n, examples
}
