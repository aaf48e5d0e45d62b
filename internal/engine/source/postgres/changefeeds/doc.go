// Package changefeeds proves the PostgreSQL source in a running cluster:
// changefeeds of a real database (started by the tests on loopback)
// through captures in one process (enginetest), under a workload,
// through splits, moves, drains, crashes and outages, each ending with
// the sink rebuilt and compared with the tables. It holds only tests;
// they are apart from the source's own, and the schema's life under a
// changefeed is proved in package lifecycle, so that each package's tests
// stay within CI's bound on one package.
package changefeeds
