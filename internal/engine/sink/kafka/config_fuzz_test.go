package kafka

import "testing"

// FuzzParseURI: a sink URI is operator input; parsing never panics, and
// what it accepts is within the documented bounds.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{
		"kafka://127.0.0.1:9092/topic",
		"kafka://a:1,b:2/t?partition=table&partition-num=6&replication-factor=3&max-message-bytes=1048576",
		"kafka://h:9092/t?dial-timeout=1s&retry-timeout=3s&recover-timeout=60s",
		"kafka://h:9092/t?recover-timeout=10ms",
		"kafka://h:9092/t?buffer-memory=67108864",
		"kafka://h/t", "kafka:///t", "kafka://h:1/%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseURI(raw)
		if err != nil {
			return
		}
		if c.Topic == "" || len(c.Brokers) == 0 || c.PartitionNum < 1 || c.RecoverTimeout < 0 || c.RetryTimeout < 0 {
			t.Fatalf("accepted %q as %+v", raw, c)
		}
	})
}
