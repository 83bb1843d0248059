# cmdq — the one test command (README and .ci/run use `make test`).
SHELL := /bin/bash
GO ?= go
AZURITE_DIR := tools/azurite
AZURITE_BIN := $(AZURITE_DIR)/node_modules/.bin/azurite
# staticcheck runs with `go run …@version`: a development tool stays out of
# the module graph of programs that import cmdq.
STATICCHECK_VERSION ?= v0.6.1

.PHONY: test tail azurite browser lint openapi-tools openapi-client unit race fuzz-smoke bench-smoke bench-peers chaos chaos-long soak

# ARTIFACTS is where tests leave files to look at: the browser test's
# screenshots go to $(ARTIFACTS)/browser.
ARTIFACTS ?= $(CURDIR)/artifacts

# test installs Azurite from the pinned package-lock and Debian's Chromium if
# missing, checks formatting, vet and staticcheck, generates a TypeScript
# client from api/openapi.json and compiles a use of it (openapi-client), runs every test with
# Azurite and Chromium required (a missing one fails, never skips), the
# concurrent core again under the race detector, the fuzz smoke step, the
# bench smoke step (storage operations per command) and the short form of
# the reliability suite (the last three beside the race step: tail).
test: azurite browser lint openapi-client unit tail

# tail runs the race step and, beside it, the short form of the reliability
# suite (chaos), then the fuzz smoke step (on one fuzzing worker), then the
# bench smoke step: the race step is the longest (about 6 minutes on 2
# cores), the other three together about 4. The suite's runs mostly wait
# on their child processes and its invariants hold under any load (it
# passes beside a CPU hog); neither smoke step measures time (the bench
# smoke step's operation counts stay about 4.03-4.04 a command beside the
# race step, against 4.1). The race step's output is printed as it runs,
# the other three's when the race step and they have ended; the target
# fails when any step does.
tail: azurite
	@log=$$(mktemp); \
	  ( $(MAKE) --no-print-directory chaos > $$log 2>&1; echo $$? > $$log.rc; \
	    { $(MAKE) --no-print-directory fuzz-smoke FUZZPARALLEL=1 && $(MAKE) --no-print-directory bench-smoke; } > $$log.smoke 2>&1; echo $$? > $$log.smoke.rc ) & side=$$!; \
	  rc=0; $(MAKE) --no-print-directory race || rc=$$?; \
	  wait $$side; crc=$$(cat $$log.rc 2>/dev/null || echo 1); src=$$(cat $$log.smoke.rc 2>/dev/null || echo 1); \
	  echo "=== the reliability suite (chaos), run beside the race step:"; cat $$log; \
	  echo "=== the fuzz and bench smoke steps, run after it beside the race step:"; cat $$log.smoke; \
	  rm -f $$log $$log.rc $$log.smoke $$log.smoke.rc; \
	  if [ "$$rc" != 0 ]; then echo "tail: the race step failed (exit $$rc)"; fi; \
	  if [ "$$crc" != 0 ]; then echo "tail: the reliability suite failed (exit $$crc)"; fi; \
	  if [ "$$src" != 0 ]; then echo "tail: a smoke step failed (exit $$src)"; fi; \
	  [ "$$rc" = 0 ] && [ "$$crc" = 0 ] && [ "$$src" = 0 ]

azurite: $(AZURITE_BIN)

$(AZURITE_BIN): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	npm ci --prefix $(AZURITE_DIR) --no-audit --no-fund
	@touch $(AZURITE_BIN)

# browser installs Debian's chromium package when no Chromium is found, for
# the operator page's real-browser test (apt-get, sudo unless root).
browser:
	tools/install-chromium.sh

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# openapi-client checks api/openapi.json as a web front end uses it, with
# tools pinned in tools/openapi-ts (npm ci from its package-lock, as
# Azurite): openapi-typescript generates the client's types
# (tools/openapi-ts/gen/cmdq.d.ts), tsc --noEmit compiles
# tools/openapi-ts/src/client.ts (issue a command with params, read its
# status) against them, and redocly lints the description with its
# recommended rules, every warning an error (tools/openapi-ts/redocly.yaml;
# no telemetry, no update check).
OPENAPI_TS_DIR := tools/openapi-ts
OPENAPI_TS_BIN := $(OPENAPI_TS_DIR)/node_modules/.bin

openapi-tools: $(OPENAPI_TS_BIN)/openapi-typescript

$(OPENAPI_TS_BIN)/openapi-typescript: $(OPENAPI_TS_DIR)/package.json $(OPENAPI_TS_DIR)/package-lock.json
	npm ci --prefix $(OPENAPI_TS_DIR) --no-audit --no-fund
	@touch $(OPENAPI_TS_BIN)/openapi-typescript

openapi-client: openapi-tools
	cd $(OPENAPI_TS_DIR) && ./node_modules/.bin/openapi-typescript ../../api/openapi.json -o gen/cmdq.d.ts
	cd $(OPENAPI_TS_DIR) && ./node_modules/.bin/tsc -p tsconfig.json
	cd $(OPENAPI_TS_DIR) && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true ./node_modules/.bin/redocly lint --config redocly.yaml ../../api/openapi.json

# unit runs every package's tests except the reliability suite, which runs
# on its own (tail). Up to 4 packages (-p 4) and 4 tests of a package
# (-parallel 4) run at once: most of the slow ones wait (on child
# processes, on Azurite, on a schedule's ticks), not compute (with go
# test's default of one package per core, 2 cores were 60 % busy).
unit:
	CMDQ_REQUIRE_AZURITE=1 CMDQ_REQUIRE_BROWSER=1 CMDQ_ARTIFACTS=$(ARTIFACTS) $(GO) test -count=1 -p 4 -parallel 4 -timeout 15m $$($(GO) list ./... | grep -v /internal/chaos)
	@echo "screenshots of the operator page: $(ARTIFACTS)/browser"

# fuzz-smoke runs the request-decoding fuzz target for a short while; a crash
# fails the build and leaves the failing input in api/testdata/fuzz.
# FUZZPARALLEL is the number of fuzzing workers (empty: one per core).
# FUZZMINIMIZE bounds the minimization of each new interesting input (Go's
# default, 60 s, let one minimization take most of the 30 s: the progress
# line showed 0 execs/s from second 9 on, 25,626 executions in all; with
# 2 s, 71,619 and 29 new inputs instead of 1).
FUZZTIME ?= 30s
FUZZPARALLEL ?=
FUZZMINIMIZE ?= 2s
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeIssueRequest$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $(if $(FUZZPARALLEL),-parallel $(FUZZPARALLEL)) ./api

# bench-smoke runs a small `cmdq bench` on the embedded store and on Azurite
# (started from tools/azurite) and fails when a completed command costs more
# than 4.1 storage operations in the burn-down (issue 2 + process 2.03 at
# batch size 32: the first delivery's fast path skips the point read), or
# more than 4.2 in the HTTP trickle (8 clients through the API at 500/s
# embedded, 50/s Azurite: 4 + the few dequeues the in-process hand-off
# leaves, about 4.00-4.02). It checks operation counts, never times; see
# docs/performance.md.
bench-smoke: azurite
	$(GO) run ./cmd/cmdq bench --store embedded -n 3000 --latency-duration 500ms --trickle-n 1000 --idle-window 1s --max-ops-per-command 4.1 --max-trickle-ops-per-command 4.2 --json
	$(GO) run ./cmd/cmdq bench --store azure -n 300 --rate 50 --latency-duration 500ms --trickle-n 320 --idle-window -1s --baseline raw --max-ops-per-command 4.1 --max-trickle-ops-per-command 4.2 --json

# race runs the concurrent core (drivers, client, pipeline, API, console) again under
# the race detector, with go test's default of one package and one test per
# core (4 at once as in unit, with a CPU hog beside it, overloaded each
# package's Azurite: calls timed out). The packages are named longest first
# (under the detector on a loaded machine: root 3-4 minutes, the
# processor's about 3, the embedded store's, the console's and the API's
# 40-80 s; go test starts them in that order), so the two long ones start
# together rather than one after the other, and the short ones fill in. Tests that run once, in unit: the
# console's browser scenario, the
# embedded store's two SIGKILL loops (TestKillLoop, TestKillWhileCreatingStore),
# whose concurrent code runs in child processes that are killed (a race
# there would never be reported) and whose own part is a single-threaded
# reopen and read-back, minutes under the detector, and the root package's
# checks of the module that run the go command (go list, go build, go test
# of a module outside: TestOutsideModule, TestOutsideTestKit,
# TestArchitectureTable, TestPublicPackages, TestNoToolDirective,
# TestLibraryUsesOTelAPIOnly), whose work is all in those child processes.
RACE_SKIP := TestBrowserConsole|TestKillLoop|TestKillWhileCreatingStore|TestOutsideModule|TestOutsideTestKit|TestArchitectureTable|TestPublicPackages|TestNoToolDirective|TestLibraryUsesOTelAPIOnly
race:
	CMDQ_REQUIRE_AZURITE=1 $(GO) test -race -count=1 -timeout 15m -skip '^($(RACE_SKIP))$$' . ./internal/engine/processor ./storage/embedded ./console ./api ./storage/... ./internal/engine/... ./metrics ./client ./cmdqtest

# bench-peers runs one no-op workload on cmdq (embedded store), River
# (PostgreSQL) and asynq (Redis) and prints one markdown table (bench/peers,
# a separate Go module; docs/performance.md has the method). It installs
# redis-server and postgresql from Debian's packages when missing (apt-get,
# sudo unless root), starts both on free loopback ports in a temporary
# directory and removes it at the end, on failure and on Ctrl-C. Not part of
# `make test`. PEERS_FLAGS passes flags, e.g. PEERS_FLAGS='--n 2000 --runs 1'
# for a quick try, PEERS_FLAGS=--json for JSON; every flag is listed by
# `cd bench/peers && go run . --help`.
PEERS_FLAGS ?=
bench-peers:
	bench/peers/install-deps.sh
	cd bench/peers && $(GO) run . $(PEERS_FLAGS)
# chaos runs the short form of the reliability suite (internal/chaos, about 2
# minutes on 2 cores): real `cmdq serve` and `cmdq worker` processes on the
# embedded store and on Azurite, SIGKILLs, storage faults through a fault
# proxy, Azurite restarts, competing workers, a worker whose lease renewals
# are blocked. Its runs mostly wait, each in its own world, so up to 4 run
# at once (-parallel 4): it takes about as long as the Azure run (make test
# runs it, then the fuzz and bench smoke steps, beside the race step: tail). It prints each run's figures and, on a broken invariant, the
# histories, journal and logs involved. Replay a run with
# CMDQ_CHAOS_SEED=<the seed it printed>; see docs/reliability.md.
chaos: azurite
	CMDQ_REQUIRE_AZURITE=1 $(GO) test -count=1 -v -parallel 4 -timeout 20m ./internal/chaos

# chaos-long runs the long form (CMDQ_CHAOS=long): 35 to 60 minutes on 2
# cores (Azurite slows down as its tables grow), over 20,000 commands and
# hundreds of kills and storage faults.
chaos-long: azurite
	CMDQ_REQUIRE_AZURITE=1 CMDQ_CHAOS=long $(GO) test -count=1 -v -timeout 90m -run '^TestChaos$$' ./internal/chaos

# soak runs the chaos for an hour (CMDQ_CHAOS=soak; CMDQ_SOAK=20m for
# less) over both stores side by side, at about 10 kills and faults a
# minute and 4 commands a second, and samples the resident memory and
# goroutines of the Azure run's spared serve and w3 every 30 s: the report
# gives their drift, and fails on a goroutine leak. Not part of make test.
soak: azurite
	CMDQ_REQUIRE_AZURITE=1 CMDQ_CHAOS=soak $(GO) test -count=1 -v -timeout 180m -run '^TestChaos$$' ./internal/chaos
