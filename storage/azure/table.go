package azure

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/cmdq-dev/cmdq/storage"
)

type table struct {
	store  *Store
	name   string
	client *aztables.Client
}

var _ storage.Table = (*table)(nil)

func (t *table) Name() string { return t.name }

// edmTime is the wire format of Edm.DateTime: UTC with 100 ns precision.
const edmTime = "2006-01-02T15:04:05.0000000Z"

// encodeEntity writes e as Table service JSON with OData type annotations
// for the types JSON cannot carry (binary, int64, date-time, double).
func encodeEntity(e storage.Entity) ([]byte, error) {
	m := make(map[string]any, 2+2*e.PropCount())
	m["PartitionKey"], m["RowKey"] = e.PartitionKey, e.RowKey
	for name, v := range e.All() {
		var typ string
		switch x := v.(type) {
		case string, bool, int32:
			m[name] = x
		case []byte:
			m[name], typ = base64.StdEncoding.EncodeToString(x), "Edm.Binary"
		case int64:
			m[name], typ = strconv.FormatInt(x, 10), "Edm.Int64"
		case float64:
			typ = "Edm.Double"
			switch {
			case math.IsNaN(x):
				m[name] = "NaN"
			case math.IsInf(x, 1):
				m[name] = "Infinity"
			case math.IsInf(x, -1):
				m[name] = "-Infinity"
			default:
				m[name] = x
			}
		case time.Time:
			m[name], typ = x.UTC().Format(edmTime), "Edm.DateTime"
		default:
			return nil, fmt.Errorf("%w: property %q has type %T", storage.ErrInvalidArgument, name, v)
		}
		if typ != "" {
			m[name+"@odata.type"] = typ
		}
	}
	return json.Marshal(m)
}

// decodeEntity parses one entity of the service's JSON (minimal or full
// metadata), keeping number literals so that a whole-number double (sent as
// "3.0") stays float64 and an Int32 stays int32.
func decodeEntity(raw map[string]json.RawMessage, etag string) (storage.Entity, error) {
	e := storage.Entity{ETag: etag, Properties: map[string]any{}}
	typeOf := func(name string) string {
		var s string
		if r, ok := raw[name+"@odata.type"]; ok {
			_ = json.Unmarshal(r, &s)
		}
		return s
	}
	for name, r := range raw {
		if strings.Contains(name, "@odata.") || strings.HasPrefix(name, "odata.") {
			if name == "odata.etag" && e.ETag == "" {
				_ = json.Unmarshal(r, &e.ETag)
			}
			continue
		}
		var err error
		switch name {
		case "PartitionKey":
			err = json.Unmarshal(r, &e.PartitionKey)
		case "RowKey":
			err = json.Unmarshal(r, &e.RowKey)
		case "Timestamp":
			var s string
			if err = json.Unmarshal(r, &s); err == nil {
				e.Timestamp, err = time.Parse(time.RFC3339Nano, s)
				e.Timestamp = e.Timestamp.UTC()
			}
		default:
			var v any
			v, err = decodeValue(typeOf(name), r)
			if err == nil && v != nil {
				e.Properties[name] = v
			}
		}
		if err != nil {
			return storage.Entity{}, fmt.Errorf("azure: decode property %q: %w", name, err)
		}
	}
	return e, nil
}

func decodeValue(typ string, r json.RawMessage) (any, error) {
	if string(r) == "null" {
		return nil, nil
	}
	var s string
	switch typ {
	case "Edm.Binary":
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(s)
	case "Edm.Int64":
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, err
		}
		return strconv.ParseInt(s, 10, 64)
	case "Edm.DateTime":
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		return t.UTC(), err
	case "Edm.Double":
		if err := json.Unmarshal(r, &s); err == nil {
			switch s {
			case "NaN":
				return math.NaN(), nil
			case "Infinity":
				return math.Inf(1), nil
			case "-Infinity":
				return math.Inf(-1), nil
			}
			return strconv.ParseFloat(s, 64)
		}
		var f float64
		err := json.Unmarshal(r, &f)
		return f, err
	case "Edm.Int32":
		var i int32
		err := json.Unmarshal(r, &i)
		return i, err
	case "Edm.Guid", "Edm.String":
		err := json.Unmarshal(r, &s)
		return s, err
	case "Edm.Boolean":
		var b bool
		err := json.Unmarshal(r, &b)
		return b, err
	case "":
	default:
		return nil, fmt.Errorf("unsupported type %s", typ)
	}
	switch r[0] {
	case '"':
		err := json.Unmarshal(r, &s)
		return s, err
	case 't', 'f':
		var b bool
		err := json.Unmarshal(r, &b)
		return b, err
	}
	lit := string(r)
	if strings.ContainsAny(lit, ".eE") {
		return strconv.ParseFloat(lit, 64)
	}
	i, err := strconv.ParseInt(lit, 10, 32)
	if err != nil {
		return nil, err
	}
	return int32(i), nil
}

func (t *table) Insert(ctx context.Context, e storage.Entity) (string, error) {
	if err := t.store.checkOpen(); err != nil {
		return "", err
	}
	if err := storage.ValidateEntity(e); err != nil {
		return "", err
	}
	body, err := encodeEntity(e)
	if err != nil {
		return "", err
	}
	resp, err := t.client.AddEntity(ctx, body, nil)
	if err != nil {
		return "", mapTableErr(err, t.name, "insert")
	}
	return string(resp.ETag), nil
}

func (t *table) Get(ctx context.Context, partitionKey, rowKey string) (storage.Entity, error) {
	if err := t.store.checkOpen(); err != nil {
		return storage.Entity{}, err
	}
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return storage.Entity{}, err
	}
	if err := storage.ValidateKey("RowKey", rowKey); err != nil {
		return storage.Entity{}, err
	}
	ctx, c := withCapture(ctx)
	ctx, wpk := wireKey(ctx, partitionKey)
	resp, err := t.client.GetEntity(ctx, wpk, rowKey, nil)
	if err != nil {
		return storage.Entity{}, mapTableErr(err, t.name, "get")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(c.body, &raw); err != nil {
		return storage.Entity{}, fmt.Errorf("azure: table %q get: decode response: %w", t.name, err)
	}
	e, err := decodeEntity(raw, string(resp.ETag))
	e.PartitionKey = partitionKey
	return e, err
}

func ifMatchTag(ifMatch string) *azcore.ETag {
	tag := azcore.ETagAny
	if ifMatch != "" {
		tag = azcore.ETag(ifMatch)
	}
	return &tag
}

func updateMode(m storage.UpdateMode) (aztables.UpdateMode, error) {
	switch m {
	case storage.Merge:
		return aztables.UpdateModeMerge, nil
	case storage.Replace:
		return aztables.UpdateModeReplace, nil
	}
	return "", fmt.Errorf("%w: unknown update mode %d; use storage.Merge or storage.Replace", storage.ErrInvalidArgument, m)
}

// prepareWrite checks e and mode and returns what Update and Upsert send: the
// context and body (with the empty-PartitionKey stand-in) and the SDK mode.
func (t *table) prepareWrite(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (context.Context, []byte, aztables.UpdateMode, error) {
	if err := t.store.checkOpen(); err != nil {
		return ctx, nil, "", err
	}
	if err := storage.ValidateEntity(e); err != nil {
		return ctx, nil, "", err
	}
	m, err := updateMode(mode)
	if err != nil {
		return ctx, nil, "", err
	}
	ctx, e.PartitionKey = wireKey(ctx, e.PartitionKey)
	body, err := encodeEntity(e)
	return ctx, body, m, err
}

func (t *table) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (string, error) {
	ctx, body, m, err := t.prepareWrite(ctx, e, mode)
	if err != nil {
		return "", err
	}
	resp, err := t.client.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{UpdateMode: m, IfMatch: ifMatchTag(ifMatch)})
	if err != nil {
		return "", mapTableErr(err, t.name, "update")
	}
	return string(resp.ETag), nil
}

func (t *table) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (string, error) {
	ctx, body, m, err := t.prepareWrite(ctx, e, mode)
	if err != nil {
		return "", err
	}
	resp, err := t.client.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: m})
	if err != nil {
		return "", mapTableErr(err, t.name, "upsert")
	}
	return string(resp.ETag), nil
}

func (t *table) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	if err := t.store.checkOpen(); err != nil {
		return err
	}
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return err
	}
	if err := storage.ValidateKey("RowKey", rowKey); err != nil {
		return err
	}
	ctx, wpk := wireKey(ctx, partitionKey)
	if _, err := t.client.DeleteEntity(ctx, wpk, rowKey, &aztables.DeleteEntityOptions{IfMatch: ifMatchTag(ifMatch)}); err != nil {
		return mapTableErr(err, t.name, "delete")
	}
	return nil
}

// MaxTop is the largest page Query asks for, and the default (1000, the
// Table service's maximum).
const MaxTop = 1000

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// prefixEnd returns the smallest string greater than every string with the
// given prefix, or "" if there is none.
func prefixEnd(prefix string) string {
	for len(prefix) > 0 {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		next := r + 1
		if next == 0xD800 {
			next = 0xE000
		}
		if next <= utf8.MaxRune {
			return prefix + string(next)
		}
	}
	return ""
}

const tokenVersion = "1"

func encodeToken(pk, rk *string) string {
	if (pk == nil || *pk == "") && (rk == nil || *rk == "") {
		return ""
	}
	return tokenVersion + base64.RawURLEncoding.EncodeToString([]byte(deref(pk)+"\x00"+deref(rk)))
}

func decodeToken(tok string) (pk, rk *string, err error) {
	bad := fmt.Errorf("%w: continuation token %q was not returned by this driver's Query; pass Page.Continuation unchanged", storage.ErrInvalidArgument, tok)
	if !strings.HasPrefix(tok, tokenVersion) {
		return nil, nil, bad
	}
	b, derr := base64.RawURLEncoding.DecodeString(tok[len(tokenVersion):])
	if derr != nil {
		return nil, nil, bad
	}
	p, r, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return nil, nil, bad
	}
	if p != "" {
		pk = &p
	}
	if r != "" {
		rk = &r
	}
	return pk, rk, nil
}

func (t *table) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	if err := t.store.checkOpen(); err != nil {
		return storage.Page{}, err
	}
	if q.PartitionKey != "" {
		if err := storage.ValidateKey("PartitionKey", q.PartitionKey); err != nil {
			return storage.Page{}, err
		}
	}
	if q.RowKeyPrefix != "" {
		if err := storage.ValidateKey("RowKeyPrefix", q.RowKeyPrefix); err != nil {
			return storage.Page{}, err
		}
	}
	if q.Top < 0 || q.Top > MaxTop {
		return storage.Page{}, fmt.Errorf("%w: Query.Top %d is outside 0..%d", storage.ErrInvalidArgument, q.Top, MaxTop)
	}
	top := int32(MaxTop)
	if q.Top > 0 {
		top = int32(q.Top)
	}
	opts := &aztables.ListEntitiesOptions{Top: &top}
	var filters []string
	if q.PartitionKey != "" {
		filters = append(filters, "PartitionKey eq "+quote(q.PartitionKey))
	}
	if q.RowKeyPrefix != "" {
		filters = append(filters, "RowKey ge "+quote(q.RowKeyPrefix))
		if end := prefixEnd(q.RowKeyPrefix); end != "" {
			filters = append(filters, "RowKey lt "+quote(end))
		}
	}
	if len(filters) > 0 {
		f := strings.Join(filters, " and ")
		opts.Filter = &f
	}
	if q.Continuation != "" {
		pk, rk, err := decodeToken(q.Continuation)
		if err != nil {
			return storage.Page{}, err
		}
		opts.NextPartitionKey, opts.NextRowKey = pk, rk
	}
	ctx, c := withCapture(ctx)
	resp, err := t.client.NewListEntitiesPager(opts).NextPage(ctx)
	if err != nil {
		return storage.Page{}, mapTableErr(err, t.name, "query")
	}
	var body struct {
		Value []map[string]json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(c.body, &body); err != nil {
		return storage.Page{}, fmt.Errorf("azure: table %q query: decode response: %w", t.name, err)
	}
	page := storage.Page{Entities: make([]storage.Entity, 0, len(body.Value)), Continuation: encodeToken(resp.NextPartitionKey, resp.NextRowKey)}
	for _, raw := range body.Value {
		e, err := decodeEntity(raw, "")
		if err != nil {
			return storage.Page{}, fmt.Errorf("azure: table %q query: %w", t.name, err)
		}
		page.Entities = append(page.Entities, e)
	}
	return page, nil
}

func (t *table) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) ([]string, error) {
	if err := t.store.checkOpen(); err != nil {
		return nil, err
	}
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, err
	}
	actions := make([]aztables.TransactionAction, len(ops))
	ctx, wpk := wireKey(ctx, partitionKey)
	for i, op := range ops {
		a := &actions[i]
		op.Entity.PartitionKey = wpk
		var err error
		switch op.Kind {
		case storage.OpDelete:
			a.ActionType = aztables.TransactionTypeDelete
			a.IfMatch = ifMatchTag(op.IfMatch)
			// The SDK puts a delete's keys in the URL without escaping quotes.
			a.Entity, err = json.Marshal(map[string]string{
				"PartitionKey": strings.ReplaceAll(op.Entity.PartitionKey, "'", "''"),
				"RowKey":       strings.ReplaceAll(op.Entity.RowKey, "'", "''"),
			})
		default:
			a.Entity, err = encodeEntity(op.Entity)
			switch {
			case op.Kind == storage.OpInsert:
				a.ActionType = aztables.TransactionTypeAdd
			case op.Kind == storage.OpUpdate && op.Mode == storage.Merge:
				a.ActionType, a.IfMatch = aztables.TransactionTypeUpdateMerge, ifMatchTag(op.IfMatch)
			case op.Kind == storage.OpUpdate && op.Mode == storage.Replace:
				a.ActionType, a.IfMatch = aztables.TransactionTypeUpdateReplace, ifMatchTag(op.IfMatch)
			case op.Kind == storage.OpUpsert && op.Mode == storage.Merge:
				a.ActionType = aztables.TransactionTypeInsertMerge
			case op.Kind == storage.OpUpsert && op.Mode == storage.Replace:
				a.ActionType = aztables.TransactionTypeInsertReplace
			default:
				err = fmt.Errorf("%w: unknown update mode %d; use storage.Merge or storage.Replace", storage.ErrInvalidArgument, op.Mode)
			}
			if err == nil && op.Kind != storage.OpInsert && strings.Contains(op.Entity.PartitionKey+op.Entity.RowKey, "'") {
				// aztables v1.4.1 does not escape quotes in the URL of
				// batched updates; refuse rather than touch another entity.
				err = fmt.Errorf("%w: keys containing ' are not supported in batched updates and upserts by the Azure driver; use Table.Update", storage.ErrInvalidKey)
			}
		}
		if err != nil {
			return nil, &storage.BatchError{Index: i, Err: err}
		}
	}
	ctx, c := withCapture(ctx)
	_, sdkErr := t.client.SubmitTransaction(ctx, actions, nil)
	if c.status != http.StatusAccepted || len(c.body) == 0 || c.body[0] == '{' {
		if sdkErr == nil {
			sdkErr = fmt.Errorf("unexpected response: HTTP %d", c.status)
		}
		return nil, mapTableErr(sdkErr, t.name, "batch")
	}
	etags, err := parseBatchResponse(c.header, c.body, len(ops))
	if err != nil {
		var be *storage.BatchError
		if errors.As(err, &be) {
			be.Err = fmt.Errorf("%w: table %q batch", be.Err, t.name)
			return nil, be
		}
		return nil, fmt.Errorf("azure: table %q batch: %w", t.name, err)
	}
	return etags, nil
}

// parseBatchResponse reads the multipart/mixed response of an entity group
// transaction: on success one response per operation (with its ETag), on
// failure a single error response whose message starts with the failing
// operation's index ("3:The specified entity already exists…").
func parseBatchResponse(h http.Header, body []byte, n int) ([]string, error) {
	_, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		return nil, fmt.Errorf("batch response has Content-Type %q: %v", h.Get("Content-Type"), err)
	}
	outer := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	part, err := outer.NextPart()
	if err != nil {
		return nil, fmt.Errorf("batch response: %w", err)
	}
	_, params, err = mime.ParseMediaType(part.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		// A single non-changeset part: a whole-batch error.
		return nil, innerError(part, -1, n)
	}
	inner := multipart.NewReader(part, params["boundary"])
	etags := make([]string, 0, n)
	for i := 0; ; i++ {
		p, err := inner.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("batch response part %d: %w", i, err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Errorf("batch response part %d: %w", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if err != nil {
			return nil, fmt.Errorf("batch response part %d: %w", i, err)
		}
		if resp.StatusCode >= 400 {
			idx := i
			if cid, err := strconv.Atoi(p.Header.Get("Content-ID")); err == nil && cid > 0 {
				idx = cid - 1
			} else if cid, err := strconv.Atoi(resp.Header.Get("Content-ID")); err == nil && cid > 0 {
				idx = cid - 1
			}
			return nil, responseError(resp, idx, n)
		}
		etags = append(etags, resp.Header.Get("ETag"))
	}
	if len(etags) != n {
		return nil, fmt.Errorf("batch response has %d operation results for %d operations", len(etags), n)
	}
	return etags, nil
}

func innerError(r io.Reader, idx, n int) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return fmt.Errorf("batch failed: %s", bytes.TrimSpace(b))
	}
	return responseError(resp, idx, n)
}

// responseError builds the *storage.BatchError for a failed operation's
// response. The service's message names the index ("N:…"); fallback is the
// part's position.
func responseError(resp *http.Response, idx, n int) error {
	var oe struct {
		Err struct {
			Code    string `json:"code"`
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		} `json:"odata.error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &oe)
	code, msg := oe.Err.Code, oe.Err.Message.Value
	if head, _, ok := strings.Cut(msg, ":"); ok {
		if i, err := strconv.Atoi(head); err == nil && i >= 0 && i < n {
			idx = i
		}
	}
	if idx < 0 || idx >= n {
		idx = 0
	}
	first, _, _ := strings.Cut(msg, "\n")
	sentinel := tableSentinel(code, resp.StatusCode)
	var err error
	if sentinel != nil {
		err = fmt.Errorf("%w: service error %s (HTTP %d): %s", sentinel, code, resp.StatusCode, first)
	} else {
		err = fmt.Errorf("azure: service error %s (HTTP %d): %s", code, resp.StatusCode, first)
	}
	return &storage.BatchError{Index: idx, Err: err}
}
