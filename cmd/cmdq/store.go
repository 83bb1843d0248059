package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/multi"
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
	azConns          []string
	shards           string
	azAccount        string
	azKey            string
	azIdentity       bool
	azQueueEndpoint  string
	azTableEndpoint  string
	embeddedLockWait time.Duration
	doorbellSecret   string
}

func (f *storeFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.kind, "store", defaultStore, "storage: embedded (a local data directory, one process) or azure (Azure Storage queues and tables)")
	fl.StringVar(&f.data, "data", defaultDataDir, "directory of the embedded store (created if missing)")
	fl.StringVar(&f.prefix, "prefix", cmdq.DefaultPrefix, "prefix of the queue and table names (queue <prefix>-commands, tables <prefix>commands and <prefix>poison); lowercase letters and digits")
	fl.Var((*connStrings)(&f.azConns), "azure-connection-string", "Azure Storage connection string (default: $AZURE_STORAGE_CONNECTION_STRING); repeat it (or separate several with spaces or newlines in CMDQ_AZURE_CONNECTION_STRING) to spread the deployment over several storage accounts, the first one first, in the same order in every process; an account added later carries CmdqFrom=YYYY-MM-DD (docs/scaling.md)")
	fl.StringVar(&f.shards, "shards", "", "shards of logical queues: queue=N,... (e.g. commands=4); give every process the same (docs/scaling.md). Default none: one storage queue each")
	fl.StringVar(&f.azAccount, "azure-account", "", "Azure Storage account name, with --azure-key or --azure-identity")
	fl.StringVar(&f.azKey, "azure-key", "", "Azure Storage shared key (base64), with --azure-account")
	fl.BoolVar(&f.azIdentity, "azure-identity", false, "authenticate with Microsoft Entra ID (DefaultAzureCredential: environment, workload identity, managed identity, Azure CLI), with --azure-account")
	fl.StringVar(&f.azQueueEndpoint, "azure-queue-endpoint", "", "Queue service URL (default https://<account>.queue.core.windows.net)")
	fl.StringVar(&f.azTableEndpoint, "azure-table-endpoint", "", "Table service URL (default https://<account>.table.core.windows.net)")
	fl.StringVar(&f.doorbellSecret, "doorbell-secret", "", "secret of the wake-ups between processes (docs/operations.md, \"The production shape\"): the same in every process of the deployment. Default none: derived from the Azure account key; with --azure-identity there is none, and processes find work by polling only")
}

// doorbellSecret returns --doorbell-secret as Doorbell.Secret (nil: derive
// it from the store).
func (f *storeFlags) secret() []byte {
	if f.doorbellSecret == "" {
		return nil
	}
	return []byte(f.doorbellSecret)
}

// errStoreInUse is returned when the embedded store is held by another process.
var errStoreInUse = errors.New("embedded store in use")

// open opens the store the flags name.
func (f *storeFlags) open(ctx context.Context) (storage.Store, error) {
	return f.openMode(ctx, false)
}

// openMode opens the store the flags name; readOnly opens it without
// creating anything (readonly.go) and says when there is nothing in it.
func (f *storeFlags) openMode(ctx context.Context, readOnly bool) (storage.Store, error) {
	if err := (cmdq.Config{Prefix: f.prefix}).Validate(); err != nil {
		return nil, fmt.Errorf("--prefix %q: %w (use lowercase letters and digits, starting with a letter)", f.prefix, err)
	}
	switch f.kind {
	case "embedded":
		path := f.data
		if readOnly {
			if err := noEmbeddedStore(path); err != nil {
				return nil, err
			}
		}
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
		conns := f.azConns
		if len(conns) > 1 {
			st, err := openAccounts(ctx, conns)
			if err != nil || !readOnly {
				return st, err
			}
			return readOnlyAzure(ctx, st, f.prefix)
		}
		cfg := azure.Config{
			AccountName:   f.azAccount,
			AccountKey:    f.azKey,
			QueueEndpoint: f.azQueueEndpoint,
			TableEndpoint: f.azTableEndpoint,
		}
		if len(conns) == 1 {
			cs, from, err := splitFrom(conns[0])
			if err != nil {
				return nil, err
			}
			if !from.IsZero() {
				return nil, errors.New("--azure-connection-string: CmdqFrom is for an account added to others; with one account leave it out")
			}
			cfg.ConnectionString = cs
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
		if readOnly {
			return readOnlyAzure(ctx, st, f.prefix)
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

// shardMap parses --shards (queue=N,...).
func (f *storeFlags) shardMap() (map[string]int, error) {
	if strings.TrimSpace(f.shards) == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, e := range splitList(f.shards) {
		q, n, ok := strings.Cut(e, "=")
		c, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil || c < 1 {
			return nil, fmt.Errorf("--shards %q: give queue=N pairs separated by commas, N at least 1 (e.g. commands=4)", f.shards)
		}
		out[strings.TrimSpace(q)] = c
	}
	if err := (cmdq.Config{Shards: out}).Validate(); err != nil {
		return nil, fmt.Errorf("--shards %q: %w", f.shards, err)
	}
	return out, nil
}

// fromKey is the connection string key that says from which day an added
// account takes commands (multi.Member.From); cmdq removes it before the
// string reaches the Azure SDK.
const fromKey = "cmdqfrom"

// splitFrom removes CmdqFrom=YYYY-MM-DD from a connection string and
// returns it as a time (zero without one).
func splitFrom(cs string) (string, time.Time, error) {
	var keep []string
	var from time.Time
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		if strings.EqualFold(strings.TrimSpace(k), fromKey) {
			t, err := time.Parse(time.DateOnly, strings.TrimSpace(v))
			if err != nil {
				return "", time.Time{}, fmt.Errorf("--azure-connection-string: CmdqFrom=%q: give a date YYYY-MM-DD (UTC), at least two days after every process has the account", v)
			}
			from = t
			continue
		}
		keep = append(keep, part)
	}
	return strings.Join(keep, ";"), from, nil
}

// accountName names an account for health reports and errors: its account
// name and queue endpoint host, without the key.
func accountName(i int, cs string) string {
	var account, endpoint string
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accountname":
			account = v
		case "queueendpoint":
			if u, err := url.Parse(v); err == nil {
				endpoint = u.Host
			}
		}
	}
	name := fmt.Sprintf("account %d", i)
	if account != "" {
		name += " " + account
	}
	if endpoint != "" {
		name += " at " + endpoint
	}
	return name
}

// openAccounts opens a store spread over several storage accounts
// (storage/multi); cmdq keeps its shared rows in every one of them.
func openAccounts(ctx context.Context, conns []string) (storage.Store, error) {
	var members []multi.Member
	closeAll := func() {
		for _, m := range members {
			_ = m.Store.Close()
		}
	}
	for i, c := range conns {
		cs, from, err := splitFrom(c)
		if err != nil {
			closeAll()
			return nil, err
		}
		st, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("open Azure Storage account %d: %w", i, err)
		}
		members = append(members, multi.Member{Name: accountName(i, azure.ExpandConnectionString(cs)), Store: st, From: from})
	}
	st, err := multi.New(members, multi.Options{})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("--azure-connection-string: %w", err)
	}
	return st, nil
}

// connStrings is the value of --azure-connection-string: each use (and
// each whitespace-separated string of CMDQ_AZURE_CONNECTION_STRING) adds
// one account's connection string.
type connStrings []string

func (c *connStrings) String() string { return strings.Join(*c, " ") }

// Set adds the connection strings in v (separated by whitespace, which no
// connection string contains); an empty v adds none.
func (c *connStrings) Set(v string) error {
	*c = append(*c, strings.Fields(v)...)
	return nil
}

func (c *connStrings) Type() string { return "string" }
