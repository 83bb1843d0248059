package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/cmdq-dev/cmdq/storage"
)

// Read-only commands (ls, status, poison ls and show, queue ls, periodic
// ls) open a store without creating anything in it: no data directory,
// no table, no queue. A store with nothing in it yet is said as such.

// readOnlyStore is a store whose tables and queues are opened, never
// created: a table that does not exist answers storage.ErrNotFound to
// every call, a queue that does not exist is not opened.
type readOnlyStore struct{ storage.Store }

// Table opens an existing table (storage.OpenExisting: with the drivers'
// TableOpener, no request).
func (s readOnlyStore) Table(ctx context.Context, name string) (storage.Table, error) {
	return storage.OpenExisting(ctx, s.Store, name)
}

// OpenTable is Table (storage.TableOpener).
func (s readOnlyStore) OpenTable(ctx context.Context, name string) (storage.Table, error) {
	return s.Table(ctx, name)
}

// Queue opens an existing queue: one listing of the queues with its name
// first, and ErrNotFound when it is not there.
func (s readOnlyStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	names, err := s.Store.Queues(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == name {
			return s.Store.Queue(ctx, name)
		}
	}
	return nil, fmt.Errorf("%w: queue %q does not exist", storage.ErrNotFound, name)
}

// noEmbeddedStore reports, for a read-only open, that dir holds no
// embedded store (missing or empty), without creating it.
func noEmbeddedStore(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil // Open says what is wrong with it
	}
	if len(entries) > 0 {
		return nil
	}
	return &cliError{msg: fmt.Sprintf("no cmdq store in %s: nothing issued yet? (--data names the directory of the embedded store, the one `cmdq serve --data` uses; default %s)", dir, defaultDataDir),
		err: storage.ErrNotFound}
}

// checkTables reports, for a read-only open, that the account has no
// commands table under the prefix: one listing of the tables.
func checkTables(ctx context.Context, st storage.Store, prefix string) error {
	table := prefix + "commands"
	names, err := st.Tables(ctx, table)
	if err != nil {
		return fmt.Errorf("open Azure Storage: %w", err)
	}
	for _, n := range names {
		if strings.EqualFold(n, table) {
			return nil
		}
	}
	return &cliError{msg: fmt.Sprintf("no cmdq tables under prefix %q in this account (no table %s): nothing issued yet? Check --prefix and the account", prefix, table),
		err: storage.ErrNotFound}
}

// readOnlyAzure checks that st has cmdq's tables under prefix and returns
// it as a readOnlyStore; it closes st when it fails.
func readOnlyAzure(ctx context.Context, st storage.Store, prefix string) (storage.Store, error) {
	if err := checkTables(ctx, st, prefix); err != nil {
		_ = st.Close()
		return nil, err
	}
	return readOnlyStore{st}, nil
}

// storageRefused turns the storage service's refusal of the credentials
// (HTTP 401 or 403 with the SDK's whole response dump) into one line
// that says what to check.
func storageRefused(err error) error {
	var re *azcore.ResponseError
	if err == nil || !errors.As(err, &re) || (re.StatusCode != http.StatusForbidden && re.StatusCode != http.StatusUnauthorized) {
		return err
	}
	code := re.ErrorCode
	if code == "" {
		code = http.StatusText(re.StatusCode)
	}
	return &cliError{msg: fmt.Sprintf("the storage account refused the credentials (%d %s): check the key in --azure-connection-string or AZURE_STORAGE_CONNECTION_STRING, or --azure-account and --azure-key "+
		"(with --azure-identity, the identity needs the Storage Queue and Table Data Contributor roles; a storage firewall refuses with 403 too)", re.StatusCode, code), err: err}
}
