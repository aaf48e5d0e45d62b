// Package lifecycle proves the PostgreSQL source through its database's
// life under a running changefeed: tables renamed, dropped, created again
// and attached as partitions; columns dropped and added again and given
// new types; primary keys replaced; the changefeed's password rotated;
// its slot dropped outside cdcctl while it was paused.
// Each test runs a real database (started by the tests on loopback) and
// captures in one process (enginetest); those whose changefeed goes on
// run under a workload and end with the sink rebuilt and compared with
// the tables. It holds only tests; they
// are apart from changefeeds' (splits, moves, drains, crashes and
// outages) so that each package's tests stay within CI's bound on one
// package.
package lifecycle
