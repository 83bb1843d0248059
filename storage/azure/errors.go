package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"

	"github.com/cmdq-dev/cmdq/storage"
)

type ctxKey int

const (
	keyNoBody ctxKey = iota
	keyCapture
	keyEmptyPK
)

// emptyKey stands in for an empty PartitionKey, which aztables refuses to
// put in a request URL although the service accepts it; hookPolicy removes
// it from the URL and body of requests made with keyEmptyPK. Keys cannot
// contain control characters, and the random part keeps it from matching any
// property value.
var emptyKey = func() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "\x01cmdqemptykey" + hex.EncodeToString(b) + "\x01"
}()

var (
	emptyKeyJSON = func() []byte { b, _ := json.Marshal(emptyKey); return b[1 : len(b)-1] }()
	emptyKeyURL  = []byte(url.PathEscape(emptyKey))
)

// wireKey returns the partition key to hand to aztables and the context to
// use with it.
func wireKey(ctx context.Context, pk string) (context.Context, string) {
	if pk != "" {
		return ctx, pk
	}
	return context.WithValue(ctx, keyEmptyPK, true), emptyKey
}

func stripEmptyKey(req *policy.Request) error {
	u := req.Raw().URL
	if strings.Contains(u.Path, emptyKey) {
		u.Path = strings.ReplaceAll(u.Path, emptyKey, "")
		u.RawPath = ""
	}
	body := req.Body()
	if body == nil {
		return nil
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	b = bytes.ReplaceAll(b, emptyKeyJSON, nil)
	b = bytes.ReplaceAll(b, emptyKeyURL, nil)
	return req.SetBody(streaming.NopCloser(bytes.NewReader(b)), req.Raw().Header.Get("Content-Type"))
}

// captured is the final raw response of a request made with withCapture.
type captured struct {
	status int
	header http.Header
	body   []byte
}

func withCapture(ctx context.Context) (context.Context, *captured) {
	c := &captured{}
	return context.WithValue(ctx, keyCapture, c), c
}

// hookPolicy is a per-call pipeline policy. For requests whose context says
// so, it drops the request body (Update Message without a body changes only
// the visibility) and keeps a copy of the final raw response (used for batch
// results and for typed entity JSON, which the SDK re-marshals lossily). A
// storage.CallBudget in the context replaces the per-try timeout and retry
// count of the store's retry options for that call (policy.WithRetryOptions,
// which the retry policy after this one reads).
type hookPolicy struct {
	retry policy.RetryOptions // the store's retry options, defaults applied
}

func (h hookPolicy) Do(req *policy.Request) (*http.Response, error) {
	ctx := req.Raw().Context()
	if b, ok := storage.CallBudgetFrom(ctx); ok {
		req = req.WithContext(policy.WithRetryOptions(ctx, h.budgeted(b)))
	}
	if ctx.Value(keyEmptyPK) != nil {
		if err := stripEmptyKey(req); err != nil {
			return nil, err
		}
	}
	if ctx.Value(keyNoBody) != nil {
		if err := req.SetBody(nil, ""); err != nil {
			return nil, err
		}
	}
	resp, err := req.Next()
	if c, ok := ctx.Value(keyCapture).(*captured); ok && err == nil && resp != nil {
		b, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if rerr != nil {
			return nil, rerr
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		c.status, c.header, c.body = resp.StatusCode, resp.Header, b
	}
	return resp, err
}

// budgeted returns the store's retry options with b's per-try timeout and
// retry count.
func (h hookPolicy) budgeted(b storage.CallBudget) policy.RetryOptions {
	o := h.retry
	if b.PerTry > 0 {
		o.TryTimeout = b.PerTry
	}
	o.MaxRetries = int32(b.MaxRetries)
	if b.MaxRetries <= 0 {
		o.MaxRetries = -1 // azcore: 0 means its default (3), -1 means none
	}
	return o
}

// unavailableStatus reports whether an HTTP status means the service could
// not serve the request now (the statuses the SDK retries).
func unavailableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transportErr wraps an error that came back without a service answer
// (connection refused or reset, a try that timed out): storage.ErrUnavailable
// unless the caller's own context ended, which the error already says.
func transportErr(err error, what string) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("azure: %s: %w", what, err)
	}
	return fmt.Errorf("%w: azure: %s: %w", storage.ErrUnavailable, what, err)
}

func hasCode(err error, codes ...string) bool {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	for _, c := range codes {
		if re.ErrorCode == c {
			return true
		}
	}
	return false
}

type queueOp int

const (
	opOther queueOp = iota
	opUpdate
	opDelete
)

// mapQueueErr turns a Queue service error into one wrapping a storage
// sentinel (when one applies) and the SDK's *azcore.ResponseError, with the
// service's error code in the message.
func mapQueueErr(err error, name, op string, kind queueOp) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return transportErr(err, fmt.Sprintf("queue %q %s", name, op))
	}
	var sentinel error
	switch re.ErrorCode {
	case "PopReceiptMismatch":
		sentinel = storage.ErrLeaseLost
	case "MessageNotFound":
		if kind == opUpdate {
			sentinel = storage.ErrLeaseLost
		} else {
			sentinel = storage.ErrNotFound
		}
	case "QueueNotFound", "ResourceNotFound":
		sentinel = storage.ErrNotFound
	case "QueueBeingDeleted":
		// Recreating a queue within about 30 s of its deletion.
		sentinel = storage.ErrUnavailable
	case "RequestBodyTooLarge", "MessageTooLarge":
		sentinel = storage.ErrTooLarge
	case "InvalidQueryParameterValue", "OutOfRangeQueryParameterValue", "InvalidXmlDocument", "InvalidInput":
		if kind != opOther {
			// A pop receipt or message ID the service cannot parse is not one it issued.
			sentinel = storage.ErrLeaseLost
		} else {
			sentinel = storage.ErrInvalidArgument
		}
	default:
		switch re.StatusCode {
		case http.StatusNotFound:
			sentinel = storage.ErrNotFound
		case http.StatusRequestEntityTooLarge:
			sentinel = storage.ErrTooLarge
		default:
			if unavailableStatus(re.StatusCode) {
				sentinel = storage.ErrUnavailable
			}
		}
	}
	if sentinel == nil {
		return fmt.Errorf("azure: queue %q %s: service error %s (HTTP %d): %w", name, op, re.ErrorCode, re.StatusCode, err)
	}
	return fmt.Errorf("%w: queue %q %s: service error %s (HTTP %d): %w", sentinel, name, op, re.ErrorCode, re.StatusCode, err)
}

// tableSentinel maps a Table service error code and status to a sentinel.
func tableSentinel(code string, status int) error {
	switch code {
	case "EntityAlreadyExists":
		return storage.ErrExists
	case "UpdateConditionNotSatisfied", "ConditionNotMet":
		return storage.ErrConflict
	case "ResourceNotFound", "TableNotFound", "EntityNotFound":
		return storage.ErrNotFound
	case "TableBeingDeleted":
		// Recreating a table within about 30 s of its deletion.
		return storage.ErrUnavailable
	case "EntityTooLarge", "PropertyValueTooLarge", "RequestBodyTooLarge", "KeyValueTooLarge":
		return storage.ErrTooLarge
	case "InvalidInput", "OutOfRangeInput", "PropertyNameInvalid", "PropertyNameTooLong",
		"TooManyProperties", "InvalidValueType", "InvalidDuplicateRow", "CommandsInBatchActOnDifferentPartitions",
		"InvalidXmlDocument", "InvalidQueryParameterValue":
		return storage.ErrInvalidArgument
	}
	switch status {
	case http.StatusNotFound:
		return storage.ErrNotFound
	case http.StatusPreconditionFailed:
		return storage.ErrConflict
	case http.StatusConflict:
		if code == "" {
			return storage.ErrExists
		}
	case http.StatusRequestEntityTooLarge:
		return storage.ErrTooLarge
	}
	if unavailableStatus(status) {
		return storage.ErrUnavailable
	}
	return nil
}

func mapTableErr(err error, name, op string) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return transportErr(err, fmt.Sprintf("table %q %s", name, op))
	}
	sentinel := tableSentinel(re.ErrorCode, re.StatusCode)
	if sentinel == nil {
		return fmt.Errorf("azure: table %q %s: service error %s (HTTP %d): %w", name, op, re.ErrorCode, re.StatusCode, err)
	}
	return fmt.Errorf("%w: table %q %s: service error %s (HTTP %d): %w", sentinel, name, op, re.ErrorCode, re.StatusCode, err)
}
