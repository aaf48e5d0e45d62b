package redact

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestURIMasksSecretsAndKeepsTheRest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kafka://user:SECRET@127.0.0.1:9092/cdc?partition=table", "kafka://user:xxxxx@127.0.0.1:9092/cdc?partition=table"},
		{"kafka://127.0.0.1:9092/cdc?sasl-user=u&sasl-password=SECRET", "kafka://127.0.0.1:9092/cdc?sasl-password=xxxxx&sasl-user=u"},
		{"azblob://c/p?sas_token=SECRET&sig=SECRET", "azblob://c/p?sas_token=xxxxx&sig=xxxxx"},
		{"s3://b/p?endpoint=http://127.0.0.1:9000&access_key=SECRET&region=x", "s3://b/p?access_key=xxxxx&endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=x"},
		{"postgres://repl:SECRET@db:5432/shop?tables=public.orders", "postgres://repl:xxxxx@db:5432/shop?tables=public.orders"},
		{"mysql:root:SECRET@0", "mysql:xxxxx@0"},
		// User info after one slash or three is a path to the parser.
		{"mysql:/root:SECRET@127.0.0.1:3306/demo?tables=a", "mysql:/xxxxx@127.0.0.1:3306/demo?tables=a"},
		{"postgres:///cdc:SECRET@db/shop", "postgres:///xxxxx@db/shop"},
		// A password the parser takes for a port, a path, a query or a
		// fragment, the URI having a host.
		{"postgres://repl:/SECRET@db/shop", "postgres://xxxxx@db/shop"},
		{"postgres://repl:1234/SECRET@db/shop", "postgres://xxxxx@db/shop"},
		{"postgres://repl:?SECRET@db", "postgres://xxxxx@db"},
		{"mysql:root:SE#CRET@h/db", "mysql:xxxxx@h/db"},
		{"postgres://repl:12#SECRET@db", "postgres://xxxxx@db"},
		{"gen://?tables=8&keys=50", "gen://?tables=8&keys=50"},
		// A client key's file path is no secret, and verify needs it.
		{"kafka://h:1/t?enable-tls=true&cert=/etc/c.pem&key=/etc/k.pem", "kafka://h:1/t?enable-tls=true&cert=/etc/c.pem&key=/etc/k.pem"},
		{"file:///tmp/sink?flush-interval=1s", "file:///tmp/sink?flush-interval=1s"},
		{"kafka://u:SE%zzCRET@h/t", "kafka://(unparsable URI, not shown)"},
	} {
		got := URI(tc.in)
		if got != tc.want {
			t.Errorf("URI(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "SECRET") || strings.Contains(got, "CRET") {
			t.Errorf("URI(%q) shows the secret: %q", tc.in, got)
		}
	}
}

func FuzzURINeverShowsAPassword(f *testing.F) {
	f.Add("kafka://u:pw@h/t?sasl-password=pw2")
	f.Add("postgres://a:b@c/d")
	f.Fuzz(func(t *testing.T, raw string) {
		got := URI(raw)
		if URI(got) != got && !strings.Contains(got, "unparsable") {
			// Masking is stable: a shown URI shows the same again.
			t.Fatalf("URI(URI(%q)) = %q, not %q", raw, URI(got), got)
		}
	})
}

// Messages quote URIs and DSNs in every shape: an opener's error with
// the whole URL, a quoted parameter, a keyword DSN, a MySQL DSN.
func TestTextMasksEverySecretInAMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`storage sink: cannot open file:///d: open bucket file:///d?metadata=skip&password=SECRET: invalid query parameter "password"`,
			`storage sink: cannot open file:///d: open bucket file:///d?metadata=skip&password=xxxxx: invalid query parameter "password"`},
		{`open bucket gs://bkt?access_key=SECRET: invalid`, `open bucket gs://bkt?access_key=xxxxx: invalid`},
		{`s3://b?region=x&secret_access_key=SECRET: unknown query parameter`, `s3://b?region=x&secret_access_key=xxxxx: unknown query parameter`},
		{`dial "kafka://u:SECRET@h:9092/t": refused`, `dial "kafka://u:xxxxx@h:9092/t": refused`},
		{`connect host=db user=repl password=SECRET dbname=shop failed`, `connect host=db user=repl password=xxxxx dbname=shop failed`},
		{`sink URI: sasl-password="SECRET": too long`, `sink URI: sasl-password=xxxxx: too long`},
		{`election: repl:SECRET@tcp(127.0.0.1:3306)/helix refused`, `election: repl:xxxxx@tcp(127.0.0.1:3306)/helix refused`},
		{`file:///d?token=SECRET;x`, `file:///d?token=xxxxx;x`},
		{`no secrets here: 3 partitions on capture-2`, `no secrets here: 3 partitions on capture-2`},
		{`file:///tmp/sink?flush-interval=1s is fine`, `file:///tmp/sink?flush-interval=1s is fine`},
		{`source URI mysql:/root:SECRET@127.0.0.1:9712/demo: name the server`, `source URI mysql:/xxxxx@127.0.0.1:9712/demo: name the server`},
		{`source URI mysql:root:SECRET@127.0.0.1:9712/demo: name the server`, `source URI mysql:xxxxx@127.0.0.1:9712/demo: name the server`},
		{`at 10:30 on capture-1 (127.0.0.1:8301)`, `at 10:30 on capture-1 (127.0.0.1:8301)`},
		{`the form is [user[:password]@]tcp(host:3306)/database`, `the form is [user[:password]@]tcp(host:3306)/database`},
		{`connect dsn="host=db password=SECRET" failed`, `connect dsn="host=db password=xxxxx" failed`},
		{`0="0?sasl-password=SECRET`, `0="0?sasl-password=xxxxx`},
	} {
		got := Text(tc.in)
		if got != tc.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "SECRET") {
			t.Errorf("Text(%q) shows the secret: %q", tc.in, got)
		}
	}
}

// secretNames are parameter names of every scheme we accept or echo.
var secretNames = []string{"password", "sasl-password", "token", "sas_token", "secret", "secret_access_key", "access_key", "sig", "api_key", "account_key", "credential", "private_key", "pwd", "passwd"}

// FuzzTextNeverShowsASecret puts a secret (letters and digits, 8 or more)
// in a URI's query, its user info, a keyword pair or a DSN, in a message
// of any shape; the message shown never holds it.
func FuzzTextNeverShowsASecret(f *testing.F) {
	f.Add("cannot open ", "file:///tmp/d", uint8(0), "SUPERSECRETB", ": invalid query parameter", uint8(0))
	f.Add("open bucket ", "s3://b/p?region=x", uint8(5), "AKIAABCDEFGH", "", uint8(1))
	f.Add("", "kafka://h:9092/t", uint8(1), "hunter22hunter", " refused", uint8(2))
	f.Add("dsn ", "", uint8(0), "pa55word99", "", uint8(3))
	f.Fuzz(func(t *testing.T, before, base string, name uint8, secret, after string, shape uint8) {
		if len(secret) < 8 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" ||
			strings.Contains(before+base+after, secret) || strings.Contains(Mask, secret) {
			return
		}
		if strings.Trim(secret, "0123456789abcdefABCDEF") == "" && strings.ContainsFunc(before+base+after, func(r rune) bool { return r >= 0x80 }) {
			return // a shown URI escapes such bytes ("%80"): hex digits may spell the secret
		}
		n := secretNames[int(name)%len(secretNames)]
		var msg string
		switch shape % 7 {
		case 0: // a URI's query, quoted whole by an opener
			sep := "?"
			if strings.Contains(base, "?") {
				sep = "&"
			}
			msg = before + base + sep + n + "=" + secret + after
		case 1: // a user info password
			msg = before + "kafka://user:" + secret + "@h:9092/t" + after
		case 2: // a keyword pair, quoted or not
			msg = before + " " + n + "=\"" + secret + "\" " + after
		case 3: // a MySQL DSN
			msg = before + " root:" + secret + "@tcp(127.0.0.1:3306)/db" + after
		case 4: // user info after one slash, or three
			msg = before + " mysql:" + strings.Repeat("/", 1+2*int(name%2)) + "root:" + secret + "@h:3306/db" + after
		case 5: // user info without slashes
			msg = before + " mysql:root:" + secret + "@h:3306/db" + after
		case 6: // a password the parser takes for a path after a port
			msg = before + " postgres://repl:/" + secret + "@h:5432/db" + after
		}
		if got := Text(msg); strings.Contains(got, secret) {
			t.Fatalf("Text(%q) = %q shows the secret %q", msg, got, secret)
		}
	})
}

// Every line a Handler passes on is masked: its message, its values,
// an error's text, the attributes a logger carries and a group's.
func TestHandlerMasksEveryLine(t *testing.T) {
	var b strings.Builder
	log := slog.New(Handler(slog.NewTextHandler(&b, nil))).With("sink", "kafka://u:SECRET@h/t")
	log.WithGroup("g").Warn("open bucket file:///d?token=SECRET: refused",
		"err", errors.New("dial postgres://repl:SECRET@db/shop: refused"),
		slog.Group("source", "dsn", "host=db password=SECRET"), "n", 3)
	out := b.String()
	if strings.Contains(out, "SECRET") || !strings.Contains(out, "n=3") || strings.Count(out, Mask) != 4 {
		t.Fatalf("logged %q; want every secret masked (4) and the rest kept", out)
	}
}
