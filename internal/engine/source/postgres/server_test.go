package postgres

import (
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// startDB starts a PostgreSQL server (with settings) for the test, with
// an empty database db.
var startDB = pgtest.StartDB

// StartDB is startDB for the package's external benchmarks.
var StartDB = startDB

// BareRead is bareRead for the package's external benchmarks.
var BareRead = bareRead
