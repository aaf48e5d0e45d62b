# The README's test command is `go test -race -count=1 -p 3 -ldflags=-w -timeout 30m ./...`; `make test`
# runs exactly that; .ci/run runs the same lint as `make lint`, then it.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/cdcctl/cdcctl/internal/version.Version=$(VERSION)

.PHONY: build test bench lint fuzz release image

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/cdcctl ./cmd/cdcctl
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/cdc-agent ./cmd/cdc-agent

# Release artifacts into dist/ for linux/amd64 and linux/arm64: static
# binaries, the container image archive (docker/podman load), deb and rpm
# packages, SPDX SBOMs and checksums.txt (docs/deploy.md). No container
# engine or network is needed. RELEASE_VERSION defaults to the git tag.
RELEASE_VERSION ?=
ARCHES ?= amd64,arm64
release:
	$(GO) run ./internal/release/mkrelease -out dist -arch $(ARCHES) -version '$(RELEASE_VERSION)'

# The same for this machine's architecture only.
image:
	$(GO) run ./internal/release/mkrelease -out dist -arch $$($(GO) env GOARCH) -version '$(RELEASE_VERSION)'

test:
	$(GO) test -race -count=1 -p 3 -ldflags=-w -timeout 30m ./...

# Benchmarks report ratios against a baseline measured in the same run.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

# Vet with -race: what it compiles, the tests (run with -race) reuse.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet -race ./...

# Every parser of operator input, FUZZTIME each (before a release:
# make fuzz FUZZTIME=10m). Findings land in testdata/fuzz as regression seeds.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeOptional -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz FuzzLoadTokens -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz FuzzURINeverShowsAPassword -fuzztime $(FUZZTIME) ./internal/redact
	$(GO) test -run '^$$' -fuzz FuzzLivenessJSON -fuzztime $(FUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz FuzzKeyOrder -fuzztime $(FUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz FuzzKeyText -fuzztime $(FUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz FuzzPlanJSON -fuzztime $(FUZZTIME) ./internal/plan
	$(GO) test -run '^$$' -fuzz FuzzParseURI -fuzztime $(FUZZTIME) ./internal/engine/source/gen
	$(GO) test -run '^$$' -fuzz FuzzParseURI -fuzztime $(FUZZTIME) ./internal/engine/source/postgres
	$(GO) test -run '^$$' -fuzz FuzzParseURI -fuzztime $(FUZZTIME) ./internal/engine/source/mysql
	$(GO) test -run '^$$' -fuzz FuzzParseURI -fuzztime $(FUZZTIME) ./internal/engine/sink/storage
	$(GO) test -run '^$$' -fuzz FuzzParseBytes -fuzztime $(FUZZTIME) ./internal/engine/sink
	$(GO) test -run '^$$' -fuzz FuzzParseURI -fuzztime $(FUZZTIME) ./internal/engine/sink/kafka
	$(GO) test -run '^$$' -fuzz FuzzDecodeRows -fuzztime $(FUZZTIME) ./internal/engine/sink/storage
	$(GO) test -run '^$$' -fuzz FuzzJSONString -fuzztime $(FUZZTIME) ./internal/engine/sink/codec
	$(GO) test -run '^$$' -fuzz FuzzHeartbeatPositions -fuzztime $(FUZZTIME) ./internal/engine/transport
	$(GO) test -run '^$$' -fuzz '^FuzzTableName$$' -fuzztime $(FUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz '^FuzzCSVRoundTrip$$' -fuzztime $(FUZZTIME) ./internal/engine/sink/codec
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCSVChanges$$' -fuzztime $(FUZZTIME) ./internal/engine/sink/codec
	$(GO) test -run '^$$' -fuzz '^FuzzErrorBodiesHideSecrets$$' -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzTextNeverShowsASecret$$' -fuzztime $(FUZZTIME) ./internal/redact
