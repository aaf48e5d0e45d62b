package model

// VerifyReport is what verify found: that a sink holds every event the
// source produced up to a checkpoint, in per-key order, or, for a
// database source, each table rebuilt from the sink compared with the
// upstream's (`cdcctl verify -o json`, POST /api/v2/changefeeds/{id}/verify).
type VerifyReport struct {
	Version int  `json:"version"`
	OK      bool `json:"ok"`
	// NotVerified are tables left out, each with why (dropped upstream).
	NotVerified []string `json:"not_verified,omitempty"`
	Tables      int      `json:"tables"`
	Keys        int      `json:"keys"`
	// Events is the number of rows read from the sink.
	Events uint64 `json:"events"`
	// Expected is the number of versions that must be present.
	Expected uint64 `json:"expected"`
	// Beyond counts the rows read that committed after the checked
	// point (the sink runs ahead of it): read = expected + beyond +
	// duplicates (+ unknown) when nothing is lost.
	Beyond     uint64 `json:"beyond"`
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	OutOfOrder uint64 `json:"out_of_order"`
	// Corrupt rows have a commit ts or payload other than the source's.
	Corrupt uint64 `json:"corrupt"`
	// Unknown rows name a table, key or version the source never produced.
	Unknown uint64 `json:"unknown"`
	// Misplaced counts schema changes out of place: a row delivered on the
	// wrong side of its table's DDL, or a DDL repeated (Kafka); for a
	// database source, a change in the files of another table version
	// than the one in force at its position (storage sinks).
	Misplaced     uint64   `json:"misplaced_ddl"`
	CheckedUpToTs uint64   `json:"checked_up_to_ts"`
	Examples      []string `json:"examples,omitempty"`
	// TableReports, for a database source, compare each table rebuilt
	// from the sink with the upstream's (Lost counts missing rows,
	// Unknown extra ones, Corrupt different ones).
	TableReports []TableVerifyReport `json:"table_reports,omitempty"`
	// Transactions, for a sink that writes transaction boundaries
	// (transaction-meta), checks them as a consumer that applies each
	// source transaction at once relies on them.
	Transactions *TransactionsVerifyReport `json:"transactions,omitempty"`
}

// TransactionsVerifyReport is the check of a sink's transaction
// boundaries up to the checked point.
type TransactionsVerifyReport struct {
	// Checked counts the transactions committed up to the checked point
	// whose END the sink holds.
	Checked int `json:"checked"`
	// Duplicates counts records and rows read more than once (each
	// counted once in the check): after a crash, at least once.
	Duplicates int `json:"duplicates"`
	// Problems are what a consumer would find wrong (at most ten): a
	// transaction whose rows do not add up to its END, rows without an
	// END, an END without a BEGIN, a table's data_collection_order not
	// 1..n.
	Problems []string `json:"problems,omitempty"`
}

// TableVerifyReport is one table's comparison of the sink with the upstream.
type TableVerifyReport struct {
	Table        string `json:"table"`
	UpstreamRows int    `json:"upstream_rows"`
	SinkRows     int    `json:"sink_rows"`
	// Missing rows are upstream and not in the sink; extra rows are in
	// the sink and not upstream; different rows are in both, unequal.
	Missing   int `json:"missing"`
	Extra     int `json:"extra"`
	Different int `json:"different"`
}
