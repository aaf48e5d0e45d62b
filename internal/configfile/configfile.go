// Package configfile checks a config file's keys against the flags they
// set, so that a typo ("servr:", "nod-id:") is refused with the keys that
// exist instead of silently ignored (and the default used).
//
// It imports viper and pflag only.
package configfile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Section is a nested part of a config file: a map of named entries
// (cdcctl's contexts), each of which may set only Keys.
type Section struct {
	Name string
	Keys []string
}

// Check reads the file at path and returns an error naming every key that
// is not a flag of flags (keys are the flags' long names).
func Check(path string, flags ...*pflag.FlagSet) error {
	return CheckSections(path, nil, nil, flags...)
}

// CheckSections is Check for a file that also has the keys extra and the
// sections' entries ("contexts.prod.server").
func CheckSections(path string, extra []string, sections []Section, flags ...*pflag.FlagSet) error {
	v := viper.New()
	v.SetConfigFile(path)
	if err := v.ReadInConfig(); err != nil {
		return err
	}
	known := func(k string) bool {
		for _, e := range extra {
			if k == e {
				return true
			}
		}
		for _, s := range sections {
			if rest, ok := strings.CutPrefix(k, s.Name+"."); ok {
				_, key, ok := strings.Cut(rest, ".")
				for _, sk := range s.Keys {
					if ok && key == sk {
						return true
					}
				}
				return false
			}
		}
		for _, f := range flags {
			if f.Lookup(k) != nil {
				return true
			}
		}
		return false
	}
	var unknown []string
	for _, k := range v.AllKeys() {
		if !known(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	var names []string
	for _, f := range flags {
		f.VisitAll(func(fl *pflag.Flag) {
			if fl.Name != "help" && fl.Name != "config" && fl.Name != "version" {
				names = append(names, fl.Name)
			}
		})
	}
	names = append(names, extra...)
	for _, s := range sections {
		names = append(names, s.Name+".NAME."+strings.Join(s.Keys, "|"))
	}
	sort.Strings(names)
	return fmt.Errorf("unknown key %s; the keys are the flags' names: %s", quoteAll(unknown), strings.Join(names, ", "))
}

func quoteAll(ks []string) string {
	q := make([]string, len(ks))
	for i, k := range ks {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}
