// Package azure is the cmdq storage driver for Azure Storage: queues on the
// Queue service (azqueue) and tables on the Table service (aztables).
//
// Open a Store with a connection string, a shared key, or a Microsoft Entra ID
// credential:
//
//	st, err := azure.Open(ctx, azure.Config{}) // AZURE_STORAGE_CONNECTION_STRING
//	st, err := azure.Open(ctx, azure.Config{AccountName: "acct", AccountKey: key})
//	cred, _ := azidentity.NewDefaultAzureCredential(nil)
//	st, err := azure.Open(ctx, azure.Config{AccountName: "acct", Credential: cred})
//
// With a Credential the identity needs the "Storage Queue Data Contributor"
// and "Storage Table Data Contributor" roles on the account.
//
// # Differences from the service and notes
//
//   - Visibility timeouts and TTLs have one-second granularity in Azure: they
//     are rounded up to whole seconds (0 stays 0). Dequeue with visibility 0
//     uses 1 second, the service's minimum for Get Messages.
//   - Message text is sent as XML text, so it may not contain characters XML
//     cannot carry (control characters other than tab, CR and LF, U+FFFE,
//     U+FFFF); Enqueue rejects them with storage.ErrInvalidArgument.
//   - Delete with a stale pop receipt gives storage.ErrLeaseLost when the
//     service says PopReceiptMismatch and storage.ErrNotFound when it says
//     MessageNotFound. Azure answers MessageNotFound both for a deleted
//     message and for some lost leases (the message was dequeued again and
//     its receipt changed), so a caller must treat ErrNotFound from Delete as
//     "no longer mine" too. UpdateVisibility maps both to storage.ErrLeaseLost.
//   - UpdateVisibility sends Update Message without a body, which the REST API
//     defines as "change visibility only": the text is never rewritten.
//   - Batch returns each operation's ETag from the transaction's response.
//   - Requests are retried by the SDK pipeline on transient faults (408, 429,
//     500, 502, 503, 504 and connection errors) with exponential backoff; see
//     Config.Retry. A retried Enqueue can therefore add a message twice, and a
//     retried Insert whose first try succeeded reports storage.ErrExists.
//   - A storage.CallBudget in a call's context (storage.WithCallBudget)
//     replaces Config.Retry's TryTimeout and MaxRetries for that call (the
//     HTTP API uses a short one so a request never waits minutes).
//   - A call that gets no answer (connection refused or reset, every try
//     timed out) or a throttling/5xx answer after the retries wraps
//     storage.ErrUnavailable; a call whose context was canceled does not.
package azure

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// EnvConnectionString is the environment variable Open reads when Config
// carries no credentials.
const EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"

// Default retry settings, used for the zero fields of Config.Retry.
const (
	// DefaultMaxRetries is how many times a failed request is retried (3).
	DefaultMaxRetries = 3
	// DefaultRetryDelay is the first backoff delay; it doubles on each retry,
	// with jitter (500 ms).
	DefaultRetryDelay = 500 * time.Millisecond
	// DefaultMaxRetryDelay caps the backoff delay (10 s).
	DefaultMaxRetryDelay = 10 * time.Second
	// DefaultTryTimeout bounds a single try of a request (60 s).
	DefaultTryTimeout = 60 * time.Second
)

// Config says how to reach an Azure Storage account. Set exactly one of
// ConnectionString, AccountKey (with AccountName) or Credential; when none is
// set, Open reads AZURE_STORAGE_CONNECTION_STRING.
type Config struct {
	// ConnectionString is an Azure Storage connection string, e.g.
	// "DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net",
	// or one with explicit QueueEndpoint and TableEndpoint (as Azurite uses).
	// "UseDevelopmentStorage=true" means Azurite on its default ports
	// (127.0.0.1:10001 and :10002). Default: empty.
	ConnectionString string

	// AccountName is the storage account's name. Required with AccountKey,
	// and with Credential unless both endpoints are set.
	AccountName string
	// AccountKey is the account's shared key (base64), used with AccountName.
	AccountKey string
	// Credential authenticates with Microsoft Entra ID, typically
	// azidentity.NewDefaultAzureCredential(nil). Default: nil.
	Credential azcore.TokenCredential

	// QueueEndpoint is the Queue service URL. Default:
	// https://{AccountName}.queue.core.windows.net. Ignored with a
	// connection string.
	QueueEndpoint string
	// TableEndpoint is the Table service URL. Default:
	// https://{AccountName}.table.core.windows.net. Ignored with a
	// connection string.
	TableEndpoint string

	// Retry tunes the SDK pipeline's retries of transient faults (408, 429,
	// 500, 502, 503, 504, timeouts and connection errors) with exponential
	// backoff and jitter. Zero fields take DefaultMaxRetries,
	// DefaultRetryDelay, DefaultMaxRetryDelay and DefaultTryTimeout;
	// MaxRetries < 0 disables retries.
	Retry policy.RetryOptions
}

// Validate reports every problem with the configuration at once (joined with
// errors.Join), each saying what to set. It does not read the environment:
// a Config with no credentials is valid and makes Open use
// AZURE_STORAGE_CONNECTION_STRING.
func (c Config) Validate() error {
	var errs []error
	modes := 0
	if c.ConnectionString != "" {
		modes++
	}
	if c.AccountKey != "" {
		modes++
	}
	if c.Credential != nil {
		modes++
	}
	if modes > 1 {
		errs = append(errs, errors.New("azure: set only one of ConnectionString, AccountKey or Credential"))
	}
	if c.ConnectionString != "" && (c.QueueEndpoint != "" || c.TableEndpoint != "") {
		errs = append(errs, errors.New("azure: QueueEndpoint and TableEndpoint are ignored with a ConnectionString; put QueueEndpoint=…;TableEndpoint=… in the connection string instead"))
	}
	if c.AccountKey != "" {
		if c.AccountName == "" {
			errs = append(errs, errors.New("azure: AccountKey needs AccountName"))
		}
		if _, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil {
			errs = append(errs, fmt.Errorf("azure: AccountKey is not base64 (copy it from the portal's Access keys page): %w", err))
		}
	}
	if c.Credential != nil && c.AccountName == "" && (c.QueueEndpoint == "" || c.TableEndpoint == "") {
		errs = append(errs, errors.New("azure: Credential needs AccountName, or both QueueEndpoint and TableEndpoint"))
	}
	if modes == 0 && (c.AccountName != "" || c.QueueEndpoint != "" || c.TableEndpoint != "") {
		errs = append(errs, errors.New("azure: AccountName/endpoints are set but no credentials: add AccountKey, or Credential (e.g. azidentity.NewDefaultAzureCredential)"))
	}
	for _, ep := range []struct{ name, v string }{{"QueueEndpoint", c.QueueEndpoint}, {"TableEndpoint", c.TableEndpoint}} {
		if ep.v == "" {
			continue
		}
		u, err := url.Parse(ep.v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("azure: %s %q is not an http(s) URL such as https://myaccount.queue.core.windows.net", ep.name, ep.v))
		}
	}
	if c.AccountName != "" && !validAccountName(c.AccountName) {
		errs = append(errs, fmt.Errorf("azure: AccountName %q must be 3-24 lowercase letters and digits", c.AccountName))
	}
	return errors.Join(errs...)
}

func validAccountName(s string) bool {
	if len(s) < 3 || len(s) > 24 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// DevAccountName and DevAccountKey are Azurite's well-known development
// account (public, documented by Microsoft).
const (
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// DevConnectionString is what "UseDevelopmentStorage=true" stands for:
// Azurite on its default ports (queue 10001, table 10002) on 127.0.0.1.
const DevConnectionString = "DefaultEndpointsProtocol=http;AccountName=" + DevAccountName + ";AccountKey=" + DevAccountKey +
	";QueueEndpoint=http://127.0.0.1:10001/" + DevAccountName + ";TableEndpoint=http://127.0.0.1:10002/" + DevAccountName + ";"

// ExpandConnectionString returns DevConnectionString for
// "UseDevelopmentStorage=true" (which the SDK's parsers do not know; case,
// surrounding spaces and a trailing ';' ignored) and cs unchanged otherwise.
// Open applies it to Config.ConnectionString.
func ExpandConnectionString(cs string) string {
	if strings.EqualFold(strings.TrimSuffix(strings.TrimSpace(cs), ";"), "UseDevelopmentStorage=true") {
		return DevConnectionString
	}
	return cs
}

// Store is a storage.Store on an Azure Storage account. Safe for concurrent
// use. Queues and tables are created on first use and remembered.
type Store struct {
	qsvc   *azqueue.ServiceClient
	tsvc   *aztables.ServiceClient
	closed atomic.Bool

	mu     sync.Mutex
	queues map[string]*queue
	tables map[string]*table

	secret []byte // SharedSecret; nil without a shared key

	clock *serverClock // the service's clock (clock.go)
}

var _ storage.Store = (*Store)(nil)

// Open validates cfg and returns a Store. It does no I/O: a wrong key or an
// unreachable account shows up on the first Queue or Table call.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ConnectionString == "" && cfg.AccountKey == "" && cfg.Credential == nil {
		cfg.ConnectionString = os.Getenv(EnvConnectionString)
		if cfg.ConnectionString == "" {
			return nil, fmt.Errorf("azure: no credentials: set Config.ConnectionString, AccountName+AccountKey, or Credential (e.g. azidentity.NewDefaultAzureCredential), or the %s environment variable", EnvConnectionString)
		}
	}
	retry := cfg.Retry
	if retry.MaxRetries == 0 {
		retry.MaxRetries = DefaultMaxRetries
	}
	if retry.RetryDelay == 0 {
		retry.RetryDelay = DefaultRetryDelay
	}
	if retry.MaxRetryDelay == 0 {
		retry.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if retry.TryTimeout == 0 {
		retry.TryTimeout = DefaultTryTimeout
	}
	sc := &serverClock{}
	co := azcore.ClientOptions{Retry: retry, PerCallPolicies: []policy.Policy{hookPolicy{retry: retry}},
		PerRetryPolicies: []policy.Policy{clockPolicy{sc}}}
	qopts := &azqueue.ClientOptions{ClientOptions: co}
	topts := &aztables.ClientOptions{ClientOptions: co}

	s := &Store{queues: map[string]*queue{}, tables: map[string]*table{}, clock: sc}
	var err error
	switch {
	case cfg.ConnectionString != "":
		cs := ExpandConnectionString(cfg.ConnectionString)
		if name, key := connectionKey(cs); key != "" {
			s.secret = sharedSecret(name, key)
		}
		if s.qsvc, err = azqueue.NewServiceClientFromConnectionString(cs, qopts); err != nil {
			return nil, fmt.Errorf("azure: connection string (queue service): %w", err)
		}
		if s.tsvc, err = aztables.NewServiceClientFromConnectionString(cs, topts); err != nil {
			return nil, fmt.Errorf("azure: connection string (table service): %w", err)
		}
	case cfg.AccountKey != "":
		s.secret = sharedSecret(cfg.AccountName, cfg.AccountKey)
		qep, tep := endpoints(cfg)
		qcred, err := azqueue.NewSharedKeyCredential(cfg.AccountName, cfg.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("azure: shared key: %w", err)
		}
		tcred, err := aztables.NewSharedKeyCredential(cfg.AccountName, cfg.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("azure: shared key: %w", err)
		}
		if s.qsvc, err = azqueue.NewServiceClientWithSharedKeyCredential(qep, qcred, qopts); err != nil {
			return nil, fmt.Errorf("azure: queue service client: %w", err)
		}
		if s.tsvc, err = aztables.NewServiceClientWithSharedKey(tep, tcred, topts); err != nil {
			return nil, fmt.Errorf("azure: table service client: %w", err)
		}
	default:
		qep, tep := endpoints(cfg)
		if s.qsvc, err = azqueue.NewServiceClient(qep, cfg.Credential, qopts); err != nil {
			return nil, fmt.Errorf("azure: queue service client: %w", err)
		}
		if s.tsvc, err = aztables.NewServiceClient(tep, cfg.Credential, topts); err != nil {
			return nil, fmt.Errorf("azure: table service client: %w", err)
		}
	}
	return s, nil
}

// SharedSecret returns a secret derived from the account's name and shared
// key (HMAC-SHA-256 keyed with the key), the same in every process that
// has them; nil with Microsoft Entra ID credentials. The key itself cannot
// be recovered from it. While an account's keys are rotated, processes on
// the two keys derive two secrets (storage.Secret).
func (s *Store) SharedSecret() []byte { return s.secret }

// sharedSecret derives the secret of an account from its name and base64
// shared key (nil when the key does not decode).
func sharedSecret(name, key string) []byte {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(k) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte("cmdq shared secret v1\x00"))
	m.Write([]byte(name))
	return m.Sum(nil)
}

// connectionKey returns a connection string's AccountName and AccountKey
// ("" when it has none, as with a SAS).
func connectionKey(cs string) (name, key string) {
	for _, part := range strings.Split(cs, ";") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accountname":
			name = strings.TrimSpace(v)
		case "accountkey":
			key = strings.TrimSpace(v)
		}
	}
	return name, key
}

func endpoints(cfg Config) (queueURL, tableURL string) {
	queueURL, tableURL = cfg.QueueEndpoint, cfg.TableEndpoint
	if queueURL == "" {
		queueURL = "https://" + cfg.AccountName + ".queue.core.windows.net"
	}
	if tableURL == "" {
		tableURL = "https://" + cfg.AccountName + ".table.core.windows.net"
	}
	return queueURL, tableURL
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return storage.ErrClosed
	}
	return nil
}

// Queue returns the named queue, creating it on first use.
func (s *Store) Queue(ctx context.Context, name string) (storage.Queue, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := storage.ValidateQueueName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	q, ok := s.queues[name]
	s.mu.Unlock()
	if ok {
		return q, nil
	}
	if _, err := s.qsvc.CreateQueue(ctx, name, nil); err != nil && !hasCode(err, "QueueAlreadyExists") {
		return nil, mapQueueErr(err, name, "create", opOther)
	}
	q = &queue{store: s, name: name, client: s.qsvc.NewQueueClient(name)}
	s.mu.Lock()
	if prev, ok := s.queues[name]; ok {
		q = prev
	} else {
		s.queues[name] = q
	}
	s.mu.Unlock()
	return q, nil
}

// Table returns the named table, creating it on first use.
func (s *Store) Table(ctx context.Context, name string) (storage.Table, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	t, ok := s.tables[name]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	if _, err := s.tsvc.CreateTable(ctx, name, nil); err != nil && !hasCode(err, "TableAlreadyExists") {
		return nil, mapTableErr(err, name, "create")
	}
	t = &table{store: s, name: name, client: s.tsvc.NewClient(name)}
	s.mu.Lock()
	if prev, ok := s.tables[name]; ok {
		t = prev
	} else {
		s.tables[name] = t
	}
	s.mu.Unlock()
	return t, nil
}

// Close marks the store closed: later calls on it and on its queues and
// tables fail with storage.ErrClosed. In-flight requests finish. It returns
// nil, also when called again.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
