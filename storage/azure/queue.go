package azure

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

type queue struct {
	store  *Store
	name   string
	client *azqueue.QueueClient
}

var _ storage.Queue = (*queue)(nil)

func (q *queue) Name() string { return q.name }

// seconds rounds d up to whole seconds (Azure's granularity).
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// notEarly returns when a message made invisible for vis whole seconds by a
// call answered just now becomes visible, not earlier than it does: the
// later of the service's answer (cut to the second, so up to 1 s early)
// and the answer's arrival plus vis (the service counted vis from when it
// received the call, before it answered). Callers that wake up at that
// time then find the message visible.
func notEarly(service *time.Time, vis int32) time.Time {
	t := time.Now().UTC().Add(time.Duration(vis) * time.Second)
	if s := ptrTime(service); s.After(t) {
		return s
	}
	return t
}

// xmlSafe reports whether s holds only characters XML 1.0 can carry.
func xmlSafe(s string) error {
	for i, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0xFFFE || r == 0xFFFF {
			return fmt.Errorf("%w: message text has character U+%04X at byte %d, which Azure Queue messages (XML) cannot carry; encode the text (for example base64)", storage.ErrInvalidArgument, r, i)
		}
	}
	return nil
}

func ptrTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func expiry(t *time.Time) time.Time {
	// A message with ttl -1 expires at 9999-12-31T23:59:59Z.
	if t == nil || t.Year() >= 9999 {
		return time.Time{}
	}
	return t.UTC()
}

// deref returns *p, or T's zero value when p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func (q *queue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	if err := q.store.checkOpen(); err != nil {
		return storage.Message{}, err
	}
	if err := storage.ValidateEnqueue(text, visibilityDelay, ttl); err != nil {
		return storage.Message{}, err
	}
	if err := xmlSafe(text); err != nil {
		return storage.Message{}, err
	}
	vis := seconds(visibilityDelay)
	var ttlSecs int32
	switch ttl {
	case storage.NoExpiry:
		ttlSecs = -1
	case 0:
		ttlSecs = seconds(storage.DefaultTTL)
	default:
		ttlSecs = seconds(ttl)
		if vis >= ttlSecs { // both rounded up to whole seconds
			ttlSecs = vis + 1
		}
	}
	resp, err := q.client.EnqueueMessage(ctx, text, &azqueue.EnqueueMessageOptions{VisibilityTimeout: &vis, TimeToLive: &ttlSecs})
	if err != nil {
		return storage.Message{}, mapQueueErr(err, q.name, "enqueue", opOther)
	}
	if len(resp.Messages) != 1 || resp.Messages[0] == nil {
		return storage.Message{}, fmt.Errorf("azure: queue %q enqueue: service returned %d messages, want 1", q.name, len(resp.Messages))
	}
	m := resp.Messages[0]
	return storage.Message{
		ID:            deref(m.MessageID),
		PopReceipt:    deref(m.PopReceipt),
		InsertedAt:    ptrTime(m.InsertionTime),
		ExpiresAt:     expiry(m.ExpirationTime),
		NextVisibleAt: notEarly(m.TimeNextVisible, vis),
	}, nil
}

func (q *queue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	if err := q.store.checkOpen(); err != nil {
		return nil, err
	}
	if err := storage.ValidateDequeue(max, visibility); err != nil {
		return nil, err
	}
	n := int32(max)
	vis := max32(seconds(visibility), 1) // Get Messages' minimum is 1 second
	resp, err := q.client.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: &n, VisibilityTimeout: &vis})
	if err != nil {
		return nil, mapQueueErr(err, q.name, "dequeue", opOther)
	}
	out := make([]storage.Message, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		if m == nil {
			continue
		}
		out = append(out, storage.Message{
			ID:            deref(m.MessageID),
			PopReceipt:    deref(m.PopReceipt),
			Text:          deref(m.MessageText),
			DequeueCount:  deref(m.DequeueCount),
			InsertedAt:    ptrTime(m.InsertionTime),
			ExpiresAt:     expiry(m.ExpirationTime),
			NextVisibleAt: ptrTime(m.TimeNextVisible),
		})
	}
	return out, nil
}

func max32(a, b int32) int32 {
	if a > b {
		return a
	}
	return b
}

func checkReceipt(id, popReceipt string) error {
	if id == "" || popReceipt == "" {
		return fmt.Errorf("%w: message ID and pop receipt must be non-empty (use the values Dequeue returned)", storage.ErrInvalidArgument)
	}
	return nil
}

func (q *queue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	if err := q.store.checkOpen(); err != nil {
		return "", time.Time{}, err
	}
	if err := checkReceipt(id, popReceipt); err != nil {
		return "", time.Time{}, err
	}
	if err := storage.ValidateVisibility(visibility); err != nil {
		return "", time.Time{}, err
	}
	vis := seconds(visibility)
	// No body: Update Message then changes only the visibility, never the text.
	ctx = context.WithValue(ctx, keyNoBody, true)
	resp, err := q.client.UpdateMessage(ctx, id, popReceipt, "", &azqueue.UpdateMessageOptions{VisibilityTimeout: &vis})
	if err != nil {
		return "", time.Time{}, mapQueueErr(err, q.name, "update visibility", opUpdate)
	}
	return deref(resp.PopReceipt), notEarly(resp.TimeNextVisible, vis), nil
}

func (q *queue) Delete(ctx context.Context, id, popReceipt string) error {
	if err := q.store.checkOpen(); err != nil {
		return err
	}
	if err := checkReceipt(id, popReceipt); err != nil {
		return err
	}
	if _, err := q.client.DeleteMessage(ctx, id, popReceipt, nil); err != nil {
		return mapQueueErr(err, q.name, "delete", opDelete)
	}
	return nil
}

func (q *queue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	if err := q.store.checkOpen(); err != nil {
		return nil, err
	}
	if err := storage.ValidateDequeue(max, 0); err != nil {
		return nil, err
	}
	n := int32(max)
	resp, err := q.client.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: &n})
	if err != nil {
		return nil, mapQueueErr(err, q.name, "peek", opOther)
	}
	out := make([]storage.Message, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		if m == nil {
			continue
		}
		out = append(out, storage.Message{
			ID:           deref(m.MessageID),
			Text:         deref(m.MessageText),
			DequeueCount: deref(m.DequeueCount),
			InsertedAt:   ptrTime(m.InsertionTime),
			ExpiresAt:    expiry(m.ExpirationTime),
		})
	}
	return out, nil
}

func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	if err := q.store.checkOpen(); err != nil {
		return 0, err
	}
	resp, err := q.client.GetProperties(ctx, nil)
	if err != nil {
		return 0, mapQueueErr(err, q.name, "get properties", opOther)
	}
	if resp.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*resp.ApproximateMessagesCount), nil
}
