package registry

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// KafkaHashPartitions is the Kafka sink's option that pins the
// partitions keys hash over (a node feature: kafka-hash-partitions).
const KafkaHashPartitions = kafka.HashPartitionsOption

// SetOptions changes parameters of an existing changefeed's sink URI:
// opts maps a parameter to its new value, "" to its default. Only the
// parameters the sink lists as changeable (how it writes: sizes, timeouts,
// credentials) are taken; what decides where and in which form the rows
// are (the location, protocol, partitioning, layout) would leave the sink
// holding two shapes of data, and is refused. It returns the new URI and
// one line per change ("flush-interval: 5s → 1s"; secrets shown as
// changed, never their values).
func SetOptions(uri string, opts map[string]string) (string, []string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", nil, fmt.Errorf("sink URI %s: %v", redact.URI(uri), redact.ParseError(err))
	}
	var safe, fixed []string
	switch u.Scheme {
	case "kafka":
		safe, fixed = kafka.ChangeableOptions, kafka.FixedOptions
	case "file", "mem", "s3", "gs", "azblob":
		safe, fixed = storage.ChangeableOptions, storage.FixedOptions
	default:
		return "", nil, fmt.Errorf("a %s:// sink has no options to change", u.Scheme)
	}
	names := make([]string, 0, len(opts))
	for k := range opts {
		names = append(names, k)
	}
	sort.Strings(names)
	q := u.Query()
	var changes []string
	for _, k := range names {
		// A cloud bucket takes parameters of its own (region,
		// endpoint): where the rows are, as the location.
		bucket := u.Scheme == "s3" || u.Scheme == "gs" || u.Scheme == "azblob"
		if !slices.Contains(safe, k) && !slices.Contains(fixed, k) && !q.Has(k) && !bucket {
			return "", nil, fmt.Errorf("sink option %s is unknown: the options of a %s:// sink that can change are %s", k, u.Scheme, strings.Join(safe, ", "))
		}
		if !slices.Contains(safe, k) {
			return "", nil, fmt.Errorf("sink option %s cannot change on a changefeed: its sink would hold rows written both ways; create a new changefeed into another location instead (changeable: %s)", k, strings.Join(safe, ", "))
		}
		before, had := q.Get(k), q.Has(k)
		v := opts[k]
		if u.Scheme == "kafka" && k == kafka.HashPartitionsOption && v == "" && had {
			// Unpinned, the sink hashes over whatever the topic has when
			// it opens: keys move once partitions are added.
			return "", nil, fmt.Errorf("sink option %s cannot be removed: the changefeed would hash its keys over all of the topic's partitions, and move them once partitions are added; set it to the count to hash over instead", k)
		}
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
		if v == before && had == (v != "") {
			continue
		}
		show := func(v string, set bool) string {
			switch {
			case !set:
				return "(default)"
			case redact.Secret(k):
				return redact.Mask
			}
			return v
		}
		line := fmt.Sprintf("%s: %s → %s", k, show(before, had), show(v, v != ""))
		if redact.Secret(k) && had && v != "" {
			line = k + ": changed"
		}
		changes = append(changes, line)
	}
	u.RawQuery = q.Encode()
	next := u.String()
	if err := Validate(next); err != nil {
		return "", nil, err
	}
	return next, changes, nil
}
