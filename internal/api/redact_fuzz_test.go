package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// secretShapes are where a secret stands in what an error may quote: a
// query parameter of every scheme we accept or echo (%s is the
// parameter's name), a user info password, a keyword DSN.
var secretShapes = []string{
	"file:///d?metadata=skip&%s=", "s3://b?region=x&%s=", "gs://bkt?%s=", "azblob://c?%s=", "mem://?%s=",
	"kafka://h:9092/t?%s=", "postgres://db/shop?%s=", "mysql://db:3306/shop?%s=",
	"kafka://user:", "postgres://repl:", "host=db %s=", "%s=\"",
}

var secretParams = []string{"password", "sasl-password", "token", "sas_token", "secret", "secret_access_key", "access_key", "sig", "api_key", "account_key", "credential", "private_key"}

// FuzzErrorBodiesHideSecrets: whatever error a handler returns, and
// whatever a coordinator's answer relayed by a follower says, the body
// served never holds a secret of a URI or DSN it quotes.
func FuzzErrorBodiesHideSecrets(f *testing.F) {
	f.Add("storage sink: cannot open ", uint8(0), uint8(0), "SUPERSECRETB", `: invalid query parameter "password"`, uint8(0))
	f.Add("open bucket ", uint8(2), uint8(6), "AKIAABCDEFGH", ": invalid", uint8(1))
	f.Add("", uint8(1), uint8(5), "wJalrXUtnFEMI", "", uint8(2))
	f.Add("dial ", uint8(8), uint8(0), "hunter22hunter", "@h:9092/t: refused", uint8(3))
	f.Add("connect ", uint8(10), uint8(0), "pa55word99", " failed", uint8(0))
	f.Fuzz(func(t *testing.T, before string, shape, name uint8, secret, after string, how uint8) {
		if len(secret) < 8 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" ||
			strings.Contains(before+after, secret) {
			return
		}
		at := secretShapes[int(shape)%len(secretShapes)]
		if strings.Contains(at, "%s") {
			at = fmt.Sprintf(at, secretParams[int(name)%len(secretParams)])
		}
		if strings.Contains(at, "://") && strings.HasSuffix(at, ":") && !strings.HasPrefix(after, "@") {
			after = "@h:1/x" + after // a user info password is followed by its host
		}
		// A name stands after a separator ("0sig" is not "sig").
		msg := before + " " + at + secret + after
		var err error
		switch how % 3 {
		case 0:
			err = Errorf(CodeBadRequest, "fix the request", "%s", msg)
		case 1:
			err = fmt.Errorf("wrapped: %w", errors.New(msg)) // an internal error
		case 2:
			err = Errorf(CodeConflict, msg, "refused")
		}
		// The body as a client reads it (a JSON escape may spell digits).
		shows := func(body string) bool {
			var e Error
			if json.Unmarshal([]byte(body), &e) != nil {
				t.Fatalf("body %q is not an error", body)
			}
			return strings.Contains(e.Message+e.Hint, secret)
		}
		w := httptest.NewRecorder()
		writeError(w, err)
		if shows(w.Body.String()) {
			t.Fatalf("error %q served as %s", msg, w.Body.String())
		}
		// Relayed by a follower, from an agent that did not mask.
		raw := httptest.NewRecorder()
		writeJSON(raw, http.StatusBadRequest, AsError(err))
		relayed := httptest.NewRecorder()
		copyResponse(relayed, raw.Result())
		if relayed.Code != http.StatusBadRequest || shows(relayed.Body.String()) {
			t.Fatalf("relayed %d %s", relayed.Code, relayed.Body.String())
		}
	})
}
