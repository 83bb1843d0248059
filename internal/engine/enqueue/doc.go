// Package enqueue is the one enqueue path: every queue message of a stored
// command — its issue (with the command in one write on a store that can),
// a re-issue, a background retry, a requeue from the poison table, a
// reconcile, a run-now and a hop of a scheduled command — is put on its
// queue by an Enqueuer, which knows the routing (the command ID routes the
// message to its account), the shards of a logical queue (ShardedQueue) and
// the in-process wake-up of a processor (or its hand-off slot). It also
// owns the issue's own message (FirstEnvelope) and the recovery enqueue of
// a command that may have a message already (Recover).
//
// It does not decide when to recover (packages issuer and reconcile) nor
// write the commands' rows itself (package record).
package enqueue
