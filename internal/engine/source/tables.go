package source

// TablesDiff are the tables of to that from does not name (added) and
// those of from that to does not (removed), each in its list's order.
// In a set: a changefeed of 100,000 tables (a schema's, a generator's)
// compared one list searched for each entry of the other, 5·10⁹ string
// comparisons, every update of its tables and every follow round of its
// rules.
func TablesDiff(from, to []string) (added, removed []string) {
	in := func(list []string) map[string]bool {
		m := make(map[string]bool, len(list))
		for _, t := range list {
			m[t] = true
		}
		return m
	}
	fromSet, toSet := in(from), in(to)
	for _, t := range to {
		if !fromSet[t] {
			added = append(added, t)
		}
	}
	for _, t := range from {
		if !toSet[t] {
			removed = append(removed, t)
		}
	}
	return added, removed
}
