package azure

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// DeleteQueue deletes the named queue (Delete Queue): one request. Its
// handles fail with storage.ErrNotFound afterwards. The service refuses to
// create a queue of the same name for about 30 seconds (QueueBeingDeleted,
// wrapping storage.ErrUnavailable).
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := storage.ValidateQueueName(name); err != nil {
		return err
	}
	_, err := s.qsvc.DeleteQueue(ctx, name, nil)
	s.mu.Lock()
	delete(s.queues, name)
	s.mu.Unlock()
	if err != nil {
		return mapQueueErr(err, name, "delete", opOther)
	}
	return nil
}

// DeleteTable deletes the named table (Delete Table): one request. Its
// handles fail with storage.ErrNotFound afterwards. The service refuses to
// create a table of the same name for about 30 seconds (TableBeingDeleted,
// wrapping storage.ErrUnavailable).
func (s *Store) DeleteTable(ctx context.Context, name string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := storage.ValidateTableName(name); err != nil {
		return err
	}
	_, err := s.tsvc.DeleteTable(ctx, name, nil)
	s.mu.Lock()
	for k := range s.tables {
		if strings.EqualFold(k, name) {
			delete(s.tables, k)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return mapTableErr(err, name, "delete")
	}
	return nil
}

// Queues lists the queues whose names start with prefix (List Queues with
// a prefix: one request per 5000 queues), sorted.
func (s *Store) Queues(ctx context.Context, prefix string) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	opts := &azqueue.ListQueuesOptions{}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	out := []string{}
	pager := s.qsvc.NewListQueuesPager(opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, mapQueueErr(err, prefix+"*", "list", opOther)
		}
		for _, q := range page.Queues {
			if q != nil && q.Name != nil && strings.HasPrefix(*q.Name, prefix) {
				out = append(out, *q.Name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Tables lists the tables whose names start with prefix (Query Tables with
// a range filter on TableName: one request per 1000 tables), sorted.
func (s *Store) Tables(ctx context.Context, prefix string) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	opts := &aztables.ListTablesOptions{}
	if prefix != "" {
		// Table names are letters and digits, all below '{'.
		f := fmt.Sprintf("TableName ge '%s' and TableName lt '%s{'", prefix, prefix)
		opts.Filter = &f
	}
	out := []string{}
	pager := s.tsvc.NewListTablesPager(opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, mapTableErr(err, prefix+"*", "list")
		}
		for _, t := range page.Tables {
			if t != nil && t.Name != nil && strings.HasPrefix(*t.Name, prefix) {
				out = append(out, *t.Name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// OpenTable returns a handle on the named table without creating it
// (storage.TableOpener): no request. Calls on it give storage.ErrNotFound
// while the table does not exist.
func (s *Store) OpenTable(ctx context.Context, name string) (storage.Table, error) {
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
	return &table{store: s, name: name, client: s.tsvc.NewClient(name)}, nil
}
