// Package changefeeds proves the MySQL/MariaDB source in a running
// cluster: changefeeds of a real MariaDB (started by the tests on
// loopback) through captures in one process (enginetest), under a
// workload, through snapshots, splits, moves, drains, crashes, a purged
// binary log and a failover to a replica, each ending with the sink
// rebuilt and compared with the tables. It holds only tests; they are
// apart from the source's own so that each package's tests stay within
// CI's bound on one package.
package changefeeds
