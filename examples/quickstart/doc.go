// Package quickstart holds runnable, tested examples of cmdq's basic use on the
// embedded store: register a typed handler, run a processor, issue a command,
// wait for it and read its status and events; and the operator's side of a
// poisoned command (list, requeue). See example_test.go; run them with
//
//	go test -v -run Example ./examples/quickstart
//
// The package itself exports nothing.
package quickstart
