package kafka_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcctl/cdcctl/internal/certs"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The sink logs in with SASL (TiCDC's parameter names) against a kfake
// broker that requires it: PLAIN and both SCRAMs write, and the rows are
// read back through the same URI; a wrong password is refused with what
// to check, never showing the password.
func TestTheSinkLogsInWithSASL(t *testing.T) {
	t.Parallel()
	evs := someEvents(t)
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "cdc", "Pa55-word"), kfake.SeedTopics(2, "t"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			base := fmt.Sprintf("kafka://%s/t?dial-timeout=2s&sasl-user=cdc&sasl-mechanism=%s", c.ListenAddrs()[0], strings.ToLower(mech))

			_, err = kafka.Open(context.Background(), base+"&sasl-password=wrong-Pa55", quiet())
			if err == nil || !strings.Contains(err.Error(), "sasl-password") || strings.Contains(err.Error(), "wrong-Pa55") {
				t.Fatalf("a wrong password: %v; want a refusal naming what to check, without the password", err)
			}

			uri := base + "&sasl-password=Pa55-word"
			s, err := kafka.Open(context.Background(), uri, quiet())
			if err != nil {
				t.Fatalf("the right password: %v", err)
			}
			defer s.Close()
			acked := make(chan error, 1)
			if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d.1", Epoch: 1, Events: evs, OnFlushed: func(err error) { acked <- err }}); err != nil {
				t.Fatal(err)
			}
			if err := <-acked; err != nil {
				t.Fatalf("written with SASL: %v", err)
			}
			cfg, err := kafka.ParseURI(uri)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			if err := kafka.ScanMessages(context.Background(), cfg, func(int32, int64, []byte) error { n++; return nil }); err != nil {
				t.Fatalf("read back with SASL: %v", err)
			}
			if n != len(evs) {
				t.Fatalf("%d messages in the topic; want %d", n, len(evs))
			}
		})
	}
}

// someEvents are 100 rows of the generator.
func someEvents(t *testing.T) []source.Event {
	const start = int64(1_800_000_000_000)
	g, err := gen.New(gen.Config{Tables: 1, Keys: 20, Rate: 200, StartMillis: start})
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.Open(model.Span{Table: g.TableNames()[0]}, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	return sourcetest.Read(t, r, model.TsFromMillis(start+1000), 100)
}

func TestSecurityParametersAreCheckedTogether(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"sasl-user=u", "sasl-user and sasl-password go together"},
		{"sasl-mechanism=plain", "sasl-mechanism needs sasl-user"},
		{"sasl-user=u&sasl-password=p&sasl-mechanism=gssapi", "use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"ca=/x.pem", "need enable-tls=true"},
		{"enable-tls=true&cert=/c.pem", "cert and key go together"},
		{"enable-tls=maybe", "use true or false"},
	} {
		_, err := kafka.ParseURI("kafka://127.0.0.1:9092/t?" + tc.query)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.query, err, tc.want)
		}
	}
}

// The sink speaks TLS to brokers that require it: trusting their CA
// (ca=), it writes; without the CA it is refused with what to check.
func TestTheSinkSpeaksTLSToTheBrokers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := certs.NewCA("kafka CA")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteAgent(dir, "broker", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := fmt.Sprintf("kafka://%s/t?dial-timeout=2s&enable-tls=true", c.ListenAddrs()[0])
	if _, err := kafka.Open(context.Background(), base, quiet()); err == nil || !strings.Contains(err.Error(), "ca (the brokers' CA)") {
		t.Fatalf("without the brokers' CA: %v; want a TLS refusal naming ca", err)
	}
	s, err := kafka.Open(context.Background(), base+"&ca="+files.CA, quiet())
	if err != nil {
		t.Fatalf("trusting the brokers' CA: %v", err)
	}
	defer s.Close()
	acked := make(chan error, 1)
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d.1", Epoch: 1, Events: someEvents(t), OnFlushed: func(err error) { acked <- err }}); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
}
