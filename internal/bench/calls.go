package bench

// Calls is a per-kind breakdown of storage calls: per completed command
// (burn-down, steady in-process, HTTP trickle, retention) or per queue per
// hour (idle).
// Every field is a billed transaction on Azure Storage; Total is their sum.
// A combined embedded write counts as the calls Azure would bill (an issue:
// one batch and one enqueue; a completion: one batch and one message delete).
type Calls struct {
	// QueueEnqueue is Queue.Enqueue calls (issue; requeue, reconcile).
	QueueEnqueue float64 `json:"queue_enqueue"`
	// QueueDequeue is Queue.Dequeue calls (each up to BatchSize messages).
	QueueDequeue float64 `json:"queue_dequeue"`
	// QueueDelete is Queue.Delete calls (the message of a finished command).
	QueueDelete float64 `json:"queue_delete"`
	// QueueUpdate is Queue.UpdateVisibility calls (renewals, retry delays,
	// releases, grown leases).
	QueueUpdate float64 `json:"queue_update"`
	// QueueOther is Peek and ApproximateCount calls.
	QueueOther float64 `json:"queue_other"`
	// TableBatch is entity group transactions (issue; the final write).
	TableBatch float64 `json:"table_batch"`
	// TablePointRead is point reads (the load of `a:cmd` before a handler runs).
	TablePointRead float64 `json:"table_point_read"`
	// TableQuery is query requests (one per page of up to 1,000 rows).
	TableQuery float64 `json:"table_query"`
	// TableOther is single-entity insert, update, upsert and delete calls.
	TableOther float64 `json:"table_other"`
	// TableList is listings of tables (Store.Tables; retention's sweep).
	TableList float64 `json:"table_list"`
	// TableDrop is tables dropped whole (Store.DeleteTable; retention's
	// sweep drops a day table once everything in it is past retention).
	TableDrop float64 `json:"table_drop"`
	// Total is the sum of the fields above.
	Total float64 `json:"total"`
}

// callsPer returns the calls of delta (per-kind counts) divided by per.
func callsPer(delta [numOps]int64, per float64) Calls {
	var v [numOps]float64
	for i, n := range delta {
		v[i] = float64(n) / per
	}
	return callsOfFloat(v)
}

// callsOfFloat groups per-kind figures into Calls.
func callsOfFloat(v [numOps]float64) Calls {
	f := func(ops ...Op) float64 {
		var n float64
		for _, o := range ops {
			n += v[o]
		}
		return n
	}
	c := Calls{
		QueueEnqueue: f(OpEnqueue), QueueDequeue: f(OpDequeue), QueueDelete: f(OpDeleteMessage),
		QueueUpdate: f(OpUpdateVisibility), QueueOther: f(OpPeek, OpCount),
		TableBatch: f(OpBatch), TablePointRead: f(OpGet), TableQuery: f(OpQuery),
		TableOther: f(OpInsert, OpUpdate, OpUpsert, OpDeleteEntity),
		TableList:  f(OpListTables), TableDrop: f(OpDeleteTable),
	}
	for _, n := range v {
		c.Total += n
	}
	return c
}

// diff returns b − a, kind by kind.
func diff(a, b [numOps]int64) [numOps]int64 {
	var d [numOps]int64
	for i := range d {
		d[i] = b[i] - a[i]
	}
	return d
}
