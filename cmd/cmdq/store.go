package main

import (
	"cmp"
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
	reserve          string // --reserve (serve and worker), "" elsewhere: the default
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

// defaultReserve is --reserve's default (embedded.DefaultReserve).
const defaultReserve = "256MiB"

// addReserve adds --reserve (serve and worker: the processes that write).
func (f *storeFlags) addReserve(c *cobra.Command) {
	c.Flags().StringVar(&f.reserve, "reserve", defaultReserve, "free space the embedded store keeps on its volume, such as 256MiB or 2GiB: below it every write is refused "+
		"(POST /v1/commands answers 507, the processor takes no work; reads go on) until space is freed, and serve and worker do not start; "+
		"new commands are refused 64 MiB earlier (docs/operations.md, \"A full disk\"). 0 turns the check off")
}

// parseSize reads a byte count: digits with an optional unit B, KiB,
// MiB, GiB or TiB (KB, MB, GB, TB and K, M, G, T are read as the binary
// units too).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size; write a byte count such as 256MiB, 2GiB or 0", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
	sh, ok := shift[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok || n > (1<<62)>>sh {
		return 0, fmt.Errorf("%q is not a size; write a byte count such as 256MiB, 2GiB or 0", s)
	}
	return n << sh, nil
}

// checkSpace refuses to start a process that writes (serve, worker) on an
// embedded store whose disk has less free space than its reserve.
func checkSpace(st storage.Store) error {
	sp, ok := storage.SpaceOf(st)
	if !ok || sp.Err != nil || sp.Free >= sp.Reserve {
		return nil
	}
	return fmt.Errorf("%w: the embedded store in %s needs at least %s free to start (--reserve), and its volume has %s: free %s there (delete files, grow the volume), or lower --reserve",
		cmdq.ErrStorageFull, sp.Dir, storage.FormatBytes(sp.Reserve), storage.FormatBytes(sp.Free), storage.FormatBytes(sp.Reserve-sp.Free))
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
		opts := &embedded.Options{LockTimeout: f.embeddedLockWait}
		if f.reserve != "" {
			n, err := parseSize(f.reserve)
			if err != nil {
				return nil, fmt.Errorf("--reserve: %w", err)
			}
			opts.Reserve = cmp.Or(n, -1) // 0: the check off
		}
		st, err := embedded.Open(path, opts)
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
