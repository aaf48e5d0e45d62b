package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The server filters a span by the text of its key's first column as it
// walks the key's index (characters, a number, a date or a time:
// firstbound.go): a chunk of a span whose rows are sparse there walks
// far to find them, for a span with none left the rest of the table.
// On a table of hundreds of millions of rows one such statement could
// outlast the chunk's two minutes, every time it was tried. Each filtered
// statement has a budget, which the server enforces (it stops walking);
// past it the chunk is read in the same window without the filter (its
// span's rows kept by the client, as before the filter), and so is every
// chunk of the span for sparseFor after.

const (
	// defaultFilterBudget is a filtered statement's budget: a chunk of a
	// span that holds a sixteenth of the table walks sixteen times its
	// rows, well under a second.
	defaultFilterBudget = 10 * time.Second
	// sparseFor is how long a span found sparse reads without the
	// filter before it tries it again.
	sparseFor = 10 * time.Minute
)

// filteredFirst says the server filters span's rows by the text of the
// key's first column (firstbound.go), not by a range of the index.
func filteredFirst(def *source.TableDef, span model.Span) bool {
	r := firstValues(def, span)
	return r.kind != kindInt && (r.hasLo || r.hasHi)
}

// sparse says span was found sparse within sparseFor.
func (s *Source) sparse(span model.Span) bool {
	s.sparseMu.Lock()
	defer s.sparseMu.Unlock()
	at, ok := s.sparseAt[span.String()]
	return ok && time.Since(at) < sparseFor
}

// markSparse records that a filtered chunk of span ran past its budget.
func (s *Source) markSparse(span model.Span) {
	s.sparseMu.Lock()
	defer s.sparseMu.Unlock()
	if s.sparseAt == nil {
		s.sparseAt = map[string]time.Time{}
	}
	if _, ok := s.sparseAt[span.String()]; !ok {
		s.log.Info("snapshot: a partition's rows are few where its chunks walk the key's index; they read the index without the server filtering them for a while", "span", span.String(), "budget", s.filterBudget.String(), "for", sparseFor.String())
	}
	s.sparseAt[span.String()] = time.Now()
}

// budgeted is q with the filter's budget, in the server's own words:
// MariaDB's SET STATEMENT max_statement_time, MySQL's MAX_EXECUTION_TIME
// hint.
func (s *Source) budgeted(mariaDB bool, q string) string {
	if mariaDB {
		return fmt.Sprintf("SET STATEMENT max_statement_time=%.3f FOR %s", s.filterBudget.Seconds(), q)
	}
	return strings.Replace(q, "SELECT ", fmt.Sprintf("SELECT /*+ MAX_EXECUTION_TIME(%d) */ ", max(s.filterBudget.Milliseconds(), 1)), 1)
}

// budgetedRead is how with each of its queries budgeted. (The server's
// flavor is asked before: the queries of more and horizon are made while
// the read holds the connection.)
func (s *Source) budgetedRead(mariaDB bool, how chunkRead) chunkRead {
	how.q = s.budgeted(mariaDB, how.q)
	if more := how.more; more != nil {
		how.more = func(c *source.Chunk, n int) (string, error) {
			q, err := more(c, n)
			return s.budgeted(mariaDB, q), err
		}
	}
	if horizon := how.horizon; horizon != nil {
		how.horizon = func() (string, error) {
			q, err := horizon()
			return s.budgeted(mariaDB, q), err
		}
	}
	return how
}

// mariaDB says the server is MariaDB (its VERSION() says so), asked
// once it answers (not under the lock: other chunks go on meanwhile).
func (s *Source) mariaDB(ctx context.Context, conn *sql.Conn) bool {
	s.sparseMu.Lock()
	flavor := s.flavor
	s.sparseMu.Unlock()
	if flavor == "" {
		var v string
		if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			// Asked again by the next chunk. (MySQL's hint is a comment to
			// MariaDB: this chunk's statements go without a budget.)
			return false
		}
		flavor = "mysql"
		if strings.Contains(strings.ToLower(v), "mariadb") {
			flavor = "mariadb"
		}
		s.sparseMu.Lock()
		s.flavor = flavor
		s.sparseMu.Unlock()
	}
	return flavor == "mariadb"
}

// overBudget says a statement was stopped at its budget: MariaDB's
// ER_STATEMENT_TIMEOUT, MySQL's ER_QUERY_TIMEOUT.
func overBudget(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == 1969 || me.Number == 3024)
}
