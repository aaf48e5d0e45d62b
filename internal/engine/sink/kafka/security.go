package kafka

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/cdcctl/cdcctl/internal/model"
)

// This file is the Kafka sink's authentication and encryption: SASL
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and TLS, set on the sink URI with
// TiCDC's parameter names (sasl-user, sasl-password, sasl-mechanism,
// enable-tls, ca, cert, key, insecure-skip-verify). The password is kept
// in the stored URI and masked wherever the URI is shown
// (internal/redact).

// Security is a sink URI's SASL and TLS settings.
type Security struct {
	SASLUser, SASLPassword string
	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with a
	// user; default SCRAM-SHA-256).
	SASLMechanism string
	TLS           bool
	// CAFile, CertFile and KeyFile are PEM files on the agents (TLS: the
	// brokers' CA; a client certificate and key, both or neither).
	CAFile, CertFile, KeyFile string
	InsecureSkipVerify        bool
}

// mechanisms are the SASL mechanisms the sink speaks, by their names in
// the URI (any case).
var mechanisms = map[string]sarama.SASLMechanism{
	"PLAIN": sarama.SASLTypePlaintext, "SCRAM-SHA-256": sarama.SASLTypeSCRAMSHA256, "SCRAM-SHA-512": sarama.SASLTypeSCRAMSHA512,
}

// param parses one of the security parameters into s; ok is
// false when key is not one of them.
func (s *Security) param(key, v string) (ok bool, err error) {
	switch key {
	case "sasl-user":
		s.SASLUser = v
	case "sasl-password":
		s.SASLPassword = v
	case "sasl-mechanism":
		m := strings.ToUpper(v)
		if _, known := mechanisms[m]; !known {
			return true, fmt.Errorf("use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		s.SASLMechanism = m
	case "enable-tls":
		s.TLS, err = parseBool(v)
	case "insecure-skip-verify":
		s.InsecureSkipVerify, err = parseBool(v)
	case "ca":
		s.CAFile = v
	case "cert":
		s.CertFile = v
	case "key":
		s.KeyFile = v
	default:
		return false, nil
	}
	return true, err
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("use true or false")
}

// check says what is missing from a URI's settings taken together.
func (s *Security) check() error {
	if (s.SASLUser == "") != (s.SASLPassword == "") {
		return fmt.Errorf("sasl-user and sasl-password go together")
	}
	if s.SASLMechanism != "" && s.SASLUser == "" {
		return fmt.Errorf("sasl-mechanism needs sasl-user and sasl-password")
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return fmt.Errorf("cert and key go together")
	}
	if !s.TLS && (s.CAFile != "" || s.CertFile != "" || s.InsecureSkipVerify) {
		return fmt.Errorf("ca, cert, key and insecure-skip-verify need enable-tls=true")
	}
	return nil
}

// apply sets the producer's (and reader's) SASL and TLS.
func (s *Security) apply(sc *sarama.Config) error {
	if s.SASLUser != "" {
		mech := s.SASLMechanism
		if mech == "" {
			mech = "SCRAM-SHA-256"
		}
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Handshake = true
		sc.Net.SASL.User, sc.Net.SASL.Password = s.SASLUser, s.SASLPassword
		sc.Net.SASL.Mechanism = mechanisms[mech]
		switch mech {
		case "SCRAM-SHA-256":
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha256.New)} }
		case "SCRAM-SHA-512":
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha512.New)} }
		}
	}
	if !s.TLS {
		return nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.InsecureSkipVerify} //nolint:gosec // only when the URI asks
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return fmt.Errorf("the Kafka sink's ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("the Kafka sink's ca %s holds no PEM certificate", s.CAFile)
		}
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return fmt.Errorf("the Kafka sink's cert and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	sc.Net.TLS.Enable, sc.Net.TLS.Config = true, tc
	return nil
}

// scramClient is sarama's SCRAM conversation over xdg-go/scram.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }

// saslRefused and tlsFailed say a connection failed on its SASL login or
// its TLS handshake.
func saslRefused(err error) bool {
	return errors.Is(err, sarama.ErrSASLAuthenticationFailed) || strings.Contains(err.Error(), "SASL")
}

func tlsFailed(err error) bool {
	return strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "tls:")
}

// loginRefused says a connection failed on its login (SASL) or its TLS:
// a setting to fix, not brokers to wait for.
func loginRefused(err error) bool { return saslRefused(err) || tlsFailed(err) }

// connectHint says what to check when the brokers cannot be reached. A
// broker that refuses a SASL login may just close the connection, so
// with SASL the login is named among the suspects.
func connectHint(err error, s Security) string {
	switch {
	case saslRefused(err):
		return "the brokers refused the SASL login: check sasl-user, sasl-password and sasl-mechanism in the sink URI"
	case tlsFailed(err):
		return "TLS with the brokers failed: check enable-tls, ca (the brokers' CA), cert and key in the sink URI"
	case s.SASLUser != "":
		return "check the brokers in the sink URI and that they are up, and the SASL login (sasl-user, sasl-password, sasl-mechanism): a broker that refuses it may just close the connection"
	case !model.DialFailed(err) && !s.TLS:
		// Connected, and the brokers closed on us: what a listener that
		// wants TLS or a login does to a client that offers neither.
		return "check the brokers in the sink URI and that they are up; brokers that close the connection at once may want TLS (enable-tls=true) or a SASL login (sasl-user, sasl-password)"
	}
	return "check the brokers in the sink URI and that they are up"
}
