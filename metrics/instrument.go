package metrics

import (
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// InstrumentStore wraps s so that every queue and table operation is counted
// in cmdq_storage_operations_total{op,result}. Queue and Table lookups are
// not counted (drivers cache them). Ops are instrument.Op names:
// queue_enqueue, queue_dequeue, queue_update_visibility, queue_delete,
// queue_peek, queue_count, table_insert, table_get, table_update,
// table_upsert, table_delete, table_query and table_batch. When s implements
// storage.Combiner (the embedded store) so does the result, each combined
// call counted as the two operations it stands for. With a nil m, s is
// returned unchanged.
func (m *Metrics) InstrumentStore(s storage.Store) storage.Store {
	if m == nil || s == nil {
		return s
	}
	return instrument.Wrap(s, instrument.Hooks{After: func(c instrument.Call) { m.StorageOp(c.Op.String(), c.Err) }})
}
