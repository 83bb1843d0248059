package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Defaults of the storage flags.
const (
	defaultStore   = "embedded"
	defaultDataDir = "./cmdq-data"
)

// storeFlags say which store to open.
type storeFlags struct {
	kind             string
	data             string
	prefix           string
	azConn           string
	azAccount        string
	azKey            string
	azIdentity       bool
	azQueueEndpoint  string
	azTableEndpoint  string
	embeddedLockWait time.Duration
}

func (f *storeFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.kind, "store", defaultStore, "storage: embedded (a local data directory, one process) or azure (Azure Storage queues and tables)")
	fl.StringVar(&f.data, "data", defaultDataDir, "directory of the embedded store (created if missing)")
	fl.StringVar(&f.prefix, "prefix", cmdqtype.DefaultPrefix, "prefix of the queue and table names (queue <prefix>-commands, tables <prefix>commands and <prefix>poison); lowercase letters and digits")
	fl.StringVar(&f.azConn, "azure-connection-string", "", "Azure Storage connection string (default: $AZURE_STORAGE_CONNECTION_STRING)")
	fl.StringVar(&f.azAccount, "azure-account", "", "Azure Storage account name, with --azure-key or --azure-identity")
	fl.StringVar(&f.azKey, "azure-key", "", "Azure Storage shared key (base64), with --azure-account")
	fl.BoolVar(&f.azIdentity, "azure-identity", false, "authenticate with Microsoft Entra ID (DefaultAzureCredential: environment, workload identity, managed identity, Azure CLI), with --azure-account")
	fl.StringVar(&f.azQueueEndpoint, "azure-queue-endpoint", "", "Queue service URL (default https://<account>.queue.core.windows.net)")
	fl.StringVar(&f.azTableEndpoint, "azure-table-endpoint", "", "Table service URL (default https://<account>.table.core.windows.net)")
}

// errStoreInUse is returned when the embedded store is held by another process.
var errStoreInUse = errors.New("embedded store in use")

// open opens the store the flags name.
func (f *storeFlags) open(ctx context.Context) (storage.Store, error) {
	if err := (cmdq.Config{Prefix: f.prefix}).Validate(); err != nil {
		return nil, fmt.Errorf("--prefix %q: %w (use lowercase letters and digits, starting with a letter)", f.prefix, err)
	}
	switch f.kind {
	case "embedded":
		path := f.data
		st, err := embedded.Open(path, &embedded.Options{LockTimeout: f.embeddedLockWait})
		if errors.Is(err, embedded.ErrInUse) {
			return nil, fmt.Errorf("%w: %s is held by another process (a running `cmdq serve` or `cmdq worker`); "+
				"the embedded store belongs to one process, so talk to that server with --server URL instead, or stop it first: %w", errStoreInUse, path, err)
		}
		if err != nil {
			return nil, fmt.Errorf("open embedded store %s: %w", path, err)
		}
		return st, nil
	case "azure":
		cfg := azure.Config{
			ConnectionString: f.azConn,
			AccountName:      f.azAccount,
			AccountKey:       f.azKey,
			QueueEndpoint:    f.azQueueEndpoint,
			TableEndpoint:    f.azTableEndpoint,
		}
		if f.azIdentity {
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("--azure-identity: %w", err)
			}
			cfg.Credential = cred
		}
		if cfg.ConnectionString == "" && cfg.AccountKey == "" && cfg.Credential == nil && os.Getenv(azure.EnvConnectionString) == "" {
			return nil, errors.New("--store azure needs credentials: set AZURE_STORAGE_CONNECTION_STRING or --azure-connection-string, " +
				"or --azure-account with --azure-key (shared key) or --azure-identity (Microsoft Entra ID)")
		}
		st, err := azure.Open(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("open Azure Storage: %w", err)
		}
		return st, nil
	default:
		return nil, fmt.Errorf("--store %q: use embedded or azure", f.kind)
	}
}

// logFlags configure the process logger.
type logFlags struct {
	level  string
	format string
}

func (f *logFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.level, "log-level", "info", "log level: trace, debug, info, warn, error")
	c.Flags().StringVar(&f.format, "log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), console or json")
}

// logger returns a zerolog logger on w (stderr in the binary).
func (f *logFlags) logger(w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(f.level))
	if err != nil || f.level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: use trace, debug, info, warn or error", f.level)
	}
	console := false
	switch f.format {
	case "auto":
		if file, ok := w.(*os.File); ok {
			console = isatty.IsTerminal(file.Fd()) || isatty.IsCygwinTerminal(file.Fd())
		}
	case "console":
		console = true
	case "json":
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: use auto, console or json", f.format)
	}
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	// One time format everywhere: RFC 3339 in UTC to the millisecond, as
	// the API, the console and the CLI print times.
	zerolog.TimeFieldFormat = logTimeFormat
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// logTimeFormat is the time format of the logs' time field (and of every
// time field they carry).
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"
