// Package embedetcd runs an etcd server inside the current process: the
// single-node default of cdc-agent, the playground's cluster store, and the
// real etcd that tests run against.
//
// It imports only etcd's server and never anything of this module.
package embedetcd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config says where the server keeps data and listens. Addresses are
// host:port; port 0 picks a free port.
type Config struct {
	Dir        string
	ClientAddr string // default 127.0.0.1:0
	PeerAddr   string // default 127.0.0.1:0
	Name       string // default "cdcctl"
	// NoFsync trades durability for speed; for tests only.
	NoFsync bool
	// Logger receives etcd's logs; nil silences them.
	Logger *zap.Logger
	// CertFile, KeyFile and TrustedCAFile, if set, serve clients over
	// TLS and require a client certificate signed by the CA (etcd's
	// --cert-file, --key-file, --trusted-ca-file, --client-cert-auth).
	CertFile, KeyFile, TrustedCAFile string
	// BcryptCost is the cost of the hashes etcd keeps and checks its
	// users' passwords against (etcd's --bcrypt-cost); 0 is etcd's
	// default, 10. Tests with authentication on set the least, 4: built
	// with -race, one check at cost 10 took seconds on a busy machine,
	// and a login past the client's dial timeout failed as a timeout.
	BcryptCost uint
}

// Server is a running embedded etcd.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
}

// Start starts the server and waits until it serves clients.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd needs a data directory")
	}
	if cfg.Name == "" {
		cfg.Name = "cdcctl"
	}
	// A port picked for "port 0" is free when picked but not held until
	// etcd binds it: another process's connection can take it meanwhile.
	// Such a start is tried again on other picked ports; a port the
	// caller named is never replaced.
	for attempt := 1; ; attempt++ {
		s, err := start(cfg)
		if err == nil || attempt == 5 || !errors.Is(err, syscall.EADDRINUSE) || !(picks(cfg.ClientAddr) || picks(cfg.PeerAddr)) {
			return s, err
		}
	}
}

// picks reports whether addr leaves the port to Start.
func picks(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return addr == "" || (err == nil && port == "0")
}

func start(cfg Config) (*Server, error) {
	clientURL, err := listenURL(cfg.ClientAddr)
	if err == nil && cfg.CertFile != "" {
		clientURL.Scheme = "https"
	}
	if err != nil {
		return nil, fmt.Errorf("embedded etcd client address: %w", err)
	}
	peerURL, err := listenURL(cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd peer address: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = cfg.Name + "=" + peerURL.String()
	ec.UnsafeNoFsync = cfg.NoFsync
	if cfg.BcryptCost != 0 {
		ec.BcryptCost = cfg.BcryptCost
	}
	if cfg.CertFile != "" {
		ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = cfg.CertFile, cfg.KeyFile
		ec.ClientTLSInfo.TrustedCAFile, ec.ClientTLSInfo.ClientCertAuth = cfg.TrustedCAFile, cfg.TrustedCAFile != ""
	}
	// Keep a minute of history, as a production etcd should be set up to
	// (--auto-compaction-retention). Without it every rewrite of a
	// changefeed's progress record stays in the database: a
	// 20,000-partition run grew it past 500 MB in six minutes. A view
	// watching from a compacted revision loads the state again.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1m"
	logger := cfg.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd did not become ready in 30s; is the data directory on a very slow disk?")
	}
	return &Server{etcd: e, endpoint: clientURL.Scheme + "://" + e.Clients[0].Addr().String()}, nil
}

// listenURL resolves port 0 to a free port now, because etcd must advertise
// the same URL it listens on.
func listenURL(addr string) (*url.URL, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		addr = l.Addr().String()
		l.Close()
	}
	return url.Parse("http://" + addr)
}

// Endpoint is the client URL, e.g. http://127.0.0.1:2379.
func (s *Server) Endpoint() string { return s.endpoint }

// Close stops the server and waits for it.
func (s *Server) Close() { s.etcd.Close() }
